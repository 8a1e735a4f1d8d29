//! Capacity mode's settings per client group, as the plan fixes them before the run: the
//! controller's numbers ([`ControllerConfig`]) and how a group's total concurrency is shared by
//! its workers ([`split`]). The controller itself is `crate::capacity`.

use crate::matrix::CapacitySettings;

/// The controller's numbers for one client group.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerConfig {
    pub target_p99_us: u64,
    pub min: u32,
    pub max: u32,
    pub increase_step: u32,
    pub slow_start: bool,
    pub decrease_rate: f64,
    pub settle_periods: u32,
    pub tolerance: f64,
    pub stable_checks: u32,
    pub max_decreases: u32,
    pub safety_factor: f64,
}

impl ControllerConfig {
    /// A group of `workers` workers: it never goes below one request in flight per worker.
    pub fn new(s: &CapacitySettings, workers: u32) -> Self {
        ControllerConfig {
            target_p99_us: s.target_p99.as_micros() as u64,
            min: s.min_concurrency.unwrap_or(1).max(workers),
            max: s.max_concurrency.max(workers),
            increase_step: s.increase_step,
            slow_start: s.slow_start,
            decrease_rate: s.decrease_rate,
            settle_periods: s.settle_periods,
            tolerance: s.tolerance,
            stable_checks: s.stable_checks,
            max_decreases: s.max_decreases,
            safety_factor: s.safety_factor,
        }
    }
}

/// Splits a group's total concurrency across its workers (the first ones get the remainder).
pub fn split(total: u32, workers: usize) -> Vec<u32> {
    let w = workers.max(1) as u32;
    (0..w)
        .map(|i| total / w + u32::from(i < total % w))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cover_the_total_and_differ_by_at_most_one() {
        assert_eq!(split(10, 4), [3, 3, 2, 2]);
        assert_eq!(split(4, 4), [1, 1, 1, 1]);
        assert_eq!(split(7, 1), [7]);
        assert_eq!(split(5, 0), [5], "no workers is treated as one");
    }
}
