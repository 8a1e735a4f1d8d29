-- Capacity mode's spike phase: an open-loop rate (requests per second) the worker sends at
-- instead of its closed-loop concurrency (0 outside a spike), and whether it counts requests
-- the overloaded server does not answer instead of failing on them (1 during a spike and its
-- recovery).
ALTER TABLE load_targets ADD COLUMN rate DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE load_targets ADD COLUMN count_unanswered BIGINT NOT NULL DEFAULT 0;
