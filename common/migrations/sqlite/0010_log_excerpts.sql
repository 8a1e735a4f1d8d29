-- A server's log lines around a failure (driver/src/launcher/logs.rs), saved by the driver at
-- the end while the logs can still be read; the report attaches them to the failures'
-- forensics. `lines` is a JSON array of strings.
CREATE TABLE log_excerpts (
    run_id    TEXT    NOT NULL,
    member_id TEXT    NOT NULL,
    from_ms   INTEGER NOT NULL,
    to_ms     INTEGER NOT NULL,
    lines     TEXT    NOT NULL,
    PRIMARY KEY (run_id, member_id, from_ms)
);
