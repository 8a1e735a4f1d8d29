-- Capacity mode. load_targets: the load the driver's controller asks of each worker: its
-- closed-loop concurrency and, for a phase with its own model mix, the mix (the worker polls its
-- row and changes both live). capacity_phases: one row per client
-- group and phase with the controller's trace and result as JSON (replaced at every check), so
-- `driver report` rebuilds the capacity section from the store.
CREATE TABLE load_targets (
    run_id        TEXT    NOT NULL,
    member_id     TEXT    NOT NULL,
    concurrency   BIGINT NOT NULL,
    mix           TEXT,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (run_id, member_id)
);

CREATE TABLE capacity_phases (
    run_id        TEXT    NOT NULL,
    group_name    TEXT    NOT NULL,
    phase         TEXT    NOT NULL,
    details       TEXT    NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (run_id, group_name, phase)
);
