-- The run over time (see common/src/interval.rs): each worker's latency per interval, and each
-- server's Triton metrics per interval. Bounded: an interval is about 1/240 of the run, so a
-- run keeps ~240 rows per (worker, scenario, model) and per server whatever its length.

-- One (scenario, model) on one worker over [start_ms, end_ms): the interval's own HDR
-- histogram (not cumulative), so percentiles merge exactly over any window and workers.
CREATE TABLE latency_intervals (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id            TEXT    NOT NULL,
    member_id         TEXT    NOT NULL,
    scenario          TEXT    NOT NULL,
    model             TEXT    NOT NULL,
    start_ms          BIGINT  NOT NULL,
    end_ms            BIGINT  NOT NULL,
    requests          BIGINT  NOT NULL,
    failures          BIGINT  NOT NULL,
    latency_histogram TEXT    NOT NULL
);
CREATE INDEX latency_intervals_by_run ON latency_intervals (run_id, end_ms);

-- One server over one interval: its per-model counter deltas, gauges and process memory, as
-- the JSON of triton_metrics::ServerSample.
CREATE TABLE server_samples (
    id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id    TEXT    NOT NULL,
    member_id TEXT    NOT NULL,
    at_ms     BIGINT  NOT NULL,
    details   TEXT    NOT NULL
);
CREATE INDEX server_samples_by_run ON server_samples (run_id, at_ms);
