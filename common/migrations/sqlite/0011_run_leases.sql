-- The driver's lease on its run: renewed while the driver lives; a run whose lease ran out
-- without a verdict lost its driver (SIGKILL, node drain) and becomes ABANDONED.
ALTER TABLE runs ADD COLUMN lease_until_ms BIGINT;
