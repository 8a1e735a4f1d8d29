-- Each worker's outages per target server (stress_common::status::Outage): a stretch without a
-- good answer from a server that had failed tests or outlasted the worker's stall threshold,
-- from its last passed test there (`last_ok_ms`) to its next (`first_ok_ms`, NULL: none came
-- by the worker's end). Appended by the snapshots that carry them; the driver matches them
-- against the faults it injected.
CREATE TABLE outages (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id           TEXT    NOT NULL,
    member_id        TEXT    NOT NULL,
    server           TEXT    NOT NULL,
    last_ok_ms       INTEGER NOT NULL,
    first_failure_ms INTEGER,
    first_ok_ms      INTEGER,
    failed_tests     INTEGER NOT NULL,
    failed_sequences INTEGER NOT NULL
);
CREATE INDEX outages_by_run ON outages (run_id, id);
