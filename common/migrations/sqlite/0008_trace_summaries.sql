-- Per server: the summary of its Triton trace files (driver/src/trace.rs) as JSON, saved by
-- the driver after the servers stop (Triton writes its last traces at shutdown), so `driver
-- report` rebuilds the trace section from the store.
CREATE TABLE trace_summaries (
    run_id        TEXT    NOT NULL,
    member_id     TEXT    NOT NULL,
    details       TEXT    NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (run_id, member_id)
);
