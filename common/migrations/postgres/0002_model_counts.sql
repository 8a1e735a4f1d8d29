-- Per (scenario, model) counts of every worker: the report's per-model table. Cumulative and
-- replaced on every snapshot, like scenario_counts. `stream` is the JSON of a decoupled model's
-- StreamCounts (NULL for other models).
CREATE TABLE model_counts (
    run_id            TEXT    NOT NULL,
    member_id         TEXT    NOT NULL,
    scenario          TEXT    NOT NULL,
    model             TEXT    NOT NULL,
    tests             BIGINT NOT NULL,
    failures          BIGINT NOT NULL,
    requests          BIGINT NOT NULL,
    latency_histogram TEXT    NOT NULL,
    stream            TEXT,
    updated_at_ms     BIGINT NOT NULL,
    PRIMARY KEY (run_id, member_id, scenario, model)
);
