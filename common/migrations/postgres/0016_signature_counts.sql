-- Each worker's failures per signature (stress_common::signature), cumulative and replaced by
-- each snapshot: the failures beyond each signature's first examples (which go to `failures` in
-- full) are only counted here. `details` is the JSON of the signature.
CREATE TABLE signature_counts (
    run_id       TEXT    NOT NULL,
    member_id    TEXT    NOT NULL,
    signature_id TEXT    NOT NULL,
    details      TEXT    NOT NULL,
    count        BIGINT  NOT NULL,
    first_at_ms  BIGINT  NOT NULL,
    last_at_ms   BIGINT  NOT NULL,
    PRIMARY KEY (run_id, member_id, signature_id)
);
