-- Traced requests (stress_common::trace). `client_spans`: a worker's sampled requests, appended
-- by the snapshots that carry them; `server_spans`: the spans Triton exported over OTLP to the
-- driver's receiver, one row each, its events as JSON ([{"name": ..., "at_ns": ...}]). Times
-- are Unix nanoseconds of the clock of the host that wrote them. The report joins the two by
-- trace id.
CREATE TABLE client_spans (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT    NOT NULL,
    member_id   TEXT    NOT NULL,
    trace_id    TEXT    NOT NULL,
    span_id     TEXT    NOT NULL,
    scenario    TEXT    NOT NULL,
    model       TEXT    NOT NULL,
    server      TEXT    NOT NULL,
    intended_ns INTEGER NOT NULL,
    sent_ns     INTEGER NOT NULL,
    answered_ns INTEGER NOT NULL,
    ok          INTEGER NOT NULL
);
CREATE INDEX client_spans_by_run ON client_spans (run_id, scenario, model);
CREATE TABLE server_spans (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id         TEXT    NOT NULL,
    server         TEXT    NOT NULL,
    trace_id       TEXT    NOT NULL,
    span_id        TEXT    NOT NULL,
    parent_span_id TEXT    NOT NULL,
    name           TEXT    NOT NULL,
    start_ns       INTEGER NOT NULL,
    end_ns         INTEGER NOT NULL,
    events         TEXT    NOT NULL
);
CREATE INDEX server_spans_by_trace ON server_spans (run_id, trace_id);
