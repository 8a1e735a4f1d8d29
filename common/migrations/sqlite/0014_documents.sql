-- Documents the driver keeps per run for its report (diagnostics, trace summaries, capacity
-- phases, SLO verdicts, the baseline comparison, log excerpts, ...), one table for every kind:
-- each is the JSON of a type its writer owns (store::Document), by kind and key. The tables each
-- kind had before are copied in and left as they were (migrations never drop data).
CREATE TABLE documents (
    run_id        TEXT    NOT NULL,
    kind          TEXT    NOT NULL,
    doc_key       TEXT    NOT NULL,
    details       TEXT    NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (run_id, kind, doc_key)
);
INSERT INTO documents (run_id, kind, doc_key, details, updated_at_ms)
    SELECT run_id, 'diagnostics', member_id, details, updated_at_ms FROM diagnostics;
INSERT INTO documents (run_id, kind, doc_key, details, updated_at_ms)
    SELECT run_id, 'trace_summary', member_id, details, updated_at_ms FROM trace_summaries;
INSERT INTO documents (run_id, kind, doc_key, details, updated_at_ms)
    SELECT run_id, 'capacity_phase', group_name || '/' || phase, details, updated_at_ms
    FROM capacity_phases;
INSERT INTO documents (run_id, kind, doc_key, details, updated_at_ms)
    SELECT run_id, 'slo_result', substr('000000' || position, -6, 6), details, updated_at_ms
    FROM slo_results;
INSERT INTO documents (run_id, kind, doc_key, details, updated_at_ms)
    SELECT run_id, 'comparison', '', details, updated_at_ms FROM comparisons;
INSERT INTO documents (run_id, kind, doc_key, details, updated_at_ms)
    SELECT run_id, 'log_excerpt', member_id || '/' || substr('00000000000000000000' || from_ms, -20, 20),
           json_object('member_id', member_id, 'from_ms', from_ms, 'to_ms', to_ms,
                       'lines', json(lines)),
           from_ms
    FROM log_excerpts;
