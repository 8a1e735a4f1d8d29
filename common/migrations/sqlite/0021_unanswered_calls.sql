-- The servers that held a worker's calls unanswered at its latest snapshot, as JSON (a list of
-- status::UnansweredCalls; '' for none): the driver fails a run on a server that took calls and
-- ended none of them for the zero-QPS window, and blames that server rather than the worker.
ALTER TABLE latest_qps ADD COLUMN unanswered TEXT NOT NULL DEFAULT '';
