-- Regressions against a baseline. baselines: the run `driver baseline set` pinned for a matrix
-- name (replaced by the next pin). comparisons: one row per run compared with its baseline (the
-- baseline, the threshold and the findings as JSON), so `driver report` rebuilds the section.
CREATE TABLE baselines (
    name         TEXT    NOT NULL PRIMARY KEY,
    run_id       TEXT    NOT NULL,
    pinned_at_ms BIGINT NOT NULL
);

CREATE TABLE comparisons (
    run_id        TEXT    NOT NULL PRIMARY KEY,
    details       TEXT    NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
