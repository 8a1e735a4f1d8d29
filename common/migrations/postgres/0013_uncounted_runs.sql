-- Runs of a child client (perf_analyzer) killed at a worker's stop before they printed their
-- count: their requests reached the servers but no worker counted them. Per worker, scenario
-- and model; the reconciliation explains a gap of up to a run's request count for each.
ALTER TABLE model_counts ADD COLUMN uncounted_runs BIGINT NOT NULL DEFAULT 0;
