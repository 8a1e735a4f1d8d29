-- SLO verdicts: one row per rule of the run's matrix (run level, then each client group's), in
-- order, with the rule, the observed value, whether it held and the window as JSON; replaced
-- when the driver judges again, so `driver report` rebuilds the SLO section from the store.
CREATE TABLE slo_results (
    run_id        TEXT    NOT NULL,
    position      INTEGER NOT NULL,
    details       TEXT    NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (run_id, position)
);
