-- Status store schema, PostgreSQL flavour (keep in step with ../sqlite/0001_initial.sql).
-- Times are ms since the Unix epoch; u64 values are stored bit-for-bit as BIGINT (i64).
-- No foreign keys on purpose: a write must never be refused because another row is missing.

CREATE TABLE runs (
    run_id         TEXT    NOT NULL PRIMARY KEY,
    name           TEXT    NOT NULL,
    matrix_yaml    TEXT    NOT NULL,
    launcher       TEXT    NOT NULL,
    started_at_ms  BIGINT  NOT NULL,
    finished_at_ms BIGINT,
    verdict        TEXT
);
CREATE INDEX runs_by_start ON runs (started_at_ms);

CREATE TABLE members (
    run_id             TEXT    NOT NULL,
    member_id          TEXT    NOT NULL,
    role               TEXT    NOT NULL,
    group_name         TEXT    NOT NULL,
    member_index       BIGINT  NOT NULL,
    address            TEXT    NOT NULL,
    process_name       TEXT    NOT NULL,
    corr_id_base       BIGINT,
    corr_id_block_size BIGINT,
    command            TEXT    NOT NULL,
    PRIMARY KEY (run_id, member_id)
);

-- Identity: ids are never reused, so a poller's "after_id" stays meaningful.
CREATE TABLE events (
    id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id    TEXT    NOT NULL,
    member_id TEXT    NOT NULL,
    at_ms     BIGINT  NOT NULL,
    kind      TEXT    NOT NULL,
    details   TEXT    NOT NULL
);
CREATE INDEX events_by_run ON events (run_id, id);

CREATE TABLE heartbeats (
    run_id    TEXT    NOT NULL,
    member_id TEXT    NOT NULL,
    at_ms     BIGINT  NOT NULL,
    PRIMARY KEY (run_id, member_id)
);

CREATE TABLE qps_samples (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id         TEXT    NOT NULL,
    member_id      TEXT    NOT NULL,
    at_ms          BIGINT  NOT NULL,
    qps            DOUBLE PRECISION NOT NULL,
    total_requests BIGINT  NOT NULL
);
CREATE INDEX qps_samples_by_run ON qps_samples (run_id, at_ms);

-- The latest QPS sample of each member, upserted with every snapshot, so the driver's poll
-- reads one row per member instead of the whole series.
CREATE TABLE latest_qps (
    run_id         TEXT    NOT NULL,
    member_id      TEXT    NOT NULL,
    at_ms          BIGINT  NOT NULL,
    qps            DOUBLE PRECISION NOT NULL,
    total_requests BIGINT  NOT NULL,
    PRIMARY KEY (run_id, member_id)
);

CREATE TABLE scenario_counts (
    run_id            TEXT    NOT NULL,
    member_id         TEXT    NOT NULL,
    scenario          TEXT    NOT NULL,
    tests             BIGINT  NOT NULL,
    failures          BIGINT  NOT NULL,
    requests          BIGINT  NOT NULL,
    skipped           BIGINT  NOT NULL,
    latency_histogram TEXT    NOT NULL,
    updated_at_ms     BIGINT  NOT NULL,
    PRIMARY KEY (run_id, member_id, scenario)
);

CREATE TABLE failures (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id         TEXT    NOT NULL,
    member_id      TEXT    NOT NULL,
    at_ms          BIGINT  NOT NULL,
    scenario       TEXT    NOT NULL,
    server         TEXT    NOT NULL,
    model          TEXT    NOT NULL,
    correlation_id BIGINT,
    expected       TEXT    NOT NULL,
    actual         TEXT    NOT NULL
);
CREATE INDEX failures_by_run ON failures (run_id, member_id, id);

-- Every failure reported per member, kept or not (only the first N rows go to `failures`).
CREATE TABLE failure_totals (
    run_id    TEXT    NOT NULL,
    member_id TEXT    NOT NULL,
    total     BIGINT  NOT NULL,
    PRIMARY KEY (run_id, member_id)
);

CREATE TABLE diagnostics (
    run_id        TEXT    NOT NULL,
    member_id     TEXT    NOT NULL,
    details       TEXT    NOT NULL,
    updated_at_ms BIGINT  NOT NULL,
    PRIMARY KEY (run_id, member_id)
);
