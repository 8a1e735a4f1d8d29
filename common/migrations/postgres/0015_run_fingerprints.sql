-- The fingerprint of the matrix a run ran (driver's matrix::fingerprint): runs with the same one
-- ran the same system under the same load and are compared with each other; NULL for runs
-- recorded before, whose matrix text the driver fingerprints when it needs to.
ALTER TABLE runs ADD COLUMN fingerprint TEXT;
CREATE INDEX runs_fingerprint ON runs (fingerprint, started_at_ms);
