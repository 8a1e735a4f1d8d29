-- Each worker's own resident memory (bytes) at each point of its QPS series: the report judges
-- its slope over the load phase's steady state as it does a server's. NULL: not known (a
-- worker from before, or a platform without /proc).
ALTER TABLE qps_samples ADD COLUMN rss_bytes BIGINT;
