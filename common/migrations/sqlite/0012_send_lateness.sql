-- Open loop: how late each send left after its intended time (an encoded HDR histogram per
-- worker and scenario; NULL where the scenario sent no open-loop request).
ALTER TABLE scenario_counts ADD COLUMN send_lateness_histogram TEXT;
