-- How many of a worker's clients were, at its latest snapshot, inside a test that counts its
-- requests only when it ends (a perf_analyzer run): the driver's zero-QPS rule does not take
-- QPS 0 from such a worker for a stall.
ALTER TABLE latest_qps ADD COLUMN deferred_clients INTEGER NOT NULL DEFAULT 0;
