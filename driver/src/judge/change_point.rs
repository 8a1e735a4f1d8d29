//! Change points over a matrix's nightly history, per metric: E-Divisive means (Matteson &
//! James, "A Nonparametric Approach for Multiple Change Point Analysis of Multivariate Data",
//! 2014) with the Student t-test and the split/merge steps of Hunter and Apache Otava (Fleming
//! et al., "Hunter: Using Change Point Detection to Hunt for Performance Regressions", 2023),
//! at Otava 0.8's defaults: windows of 50 points stepping by 25, a first pass at ten times the
//! p-value, then weak points merged away until each left has p < 0.001 and a magnitude above
//! [`Settings::min_magnitude`]. scripts/bench-change-points.sh runs Otava on the same series
//! (`driver history --format csv`) and compares the two answers.
//!
//! One deliberate difference: when a weak point is merged away, both of its neighbours are
//! re-tested (Otava 0.8 re-tests the next two, leaving the previous one's p-value stale).

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// How change points are found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Points analysed at once (Otava's `--window`, default 50).
    pub window: usize,
    /// The largest p-value of a change point kept (Otava's `-P`, default 0.001).
    pub max_p: f64,
    /// The smallest relative change kept when its p-value is already below `max_p` (Otava's
    /// `-M`, default 0: every significant change).
    pub min_magnitude: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            window: 50,
            max_p: 0.001,
            min_magnitude: 0.0,
        }
    }
}

/// A change point: the series differs from `index` on (the first point after the change).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangePoint {
    pub index: usize,
    /// The means of the segments before and after it (each bounded by the neighbouring change
    /// points).
    pub mean_before: f64,
    pub mean_after: f64,
    /// The t-test's two-sided p-value between those segments.
    pub p_value: f64,
}

impl ChangePoint {
    /// The relative change of the mean, after over before (0 when before is 0).
    pub fn change(&self) -> f64 {
        relative(self.mean_before, self.mean_after)
    }

    /// Otava's magnitude: the larger of the forward and backward relative changes.
    fn magnitude(&self) -> f64 {
        relative(self.mean_before, self.mean_after)
            .abs()
            .max(relative(self.mean_after, self.mean_before).abs())
    }
}

fn relative(from: f64, to: f64) -> f64 {
    if from == 0.0 { 0.0 } else { to / from - 1.0 }
}

/// The change points of `series` (oldest first), in order of index.
pub fn change_points(series: &[f64], settings: &Settings) -> Vec<ChangePoint> {
    let first_pass = if settings.max_p < 0.05 {
        settings.max_p * 10.0
    } else if settings.max_p < 0.5 {
        settings.max_p * 2.0
    } else {
        settings.max_p
    };
    let weak = split(series, settings.window.max(2), first_pass);
    merge(weak, series, settings)
}

/// The split step: E-Divisive in sliding windows (half a window apart), the union of what each
/// finds significant at `max_p`, re-tested over the whole series.
fn split(series: &[f64], window: usize, max_p: f64) -> Vec<usize> {
    let step = window / 2;
    let mut found: Vec<usize> = Vec::new();
    let mut start = 0;
    while start < series.len() {
        let end = (start + window).min(series.len());
        let new = divisive(&series[start..end], max_p);
        let last = new.last().map_or(0, |i| i + start);
        for i in new {
            if !found.contains(&(i + start)) {
                found.push(i + start);
            }
        }
        start = last.max(start + step);
    }
    found.sort_unstable();
    found
}

/// E-Divisive means on one window: the split that maximises the energy statistic q̂ over every
/// segment, kept while the t-test between its two sides is significant.
fn divisive(series: &[f64], max_p: f64) -> Vec<usize> {
    let pairs = PairSums::new(series);
    let mut points: Vec<usize> = Vec::new();
    loop {
        let bounds = segments(&points, series.len());
        let best = bounds
            .windows(2)
            .filter_map(|b| pairs.candidate(b[0], b[1]))
            .fold(None::<(usize, f64)>, |best, c| match best {
                Some(b) if b.1 >= c.1 => Some(b),
                _ => Some(c),
            });
        let Some((index, _)) = best else { break };
        let at = bounds.partition_point(|&b| b < index);
        let (from, to) = (bounds[at - 1], bounds[at]);
        if t_test(&series[from..index], &series[index..to]) > max_p {
            break;
        }
        points.push(index);
        points.sort_unstable();
    }
    points
}

/// 0, the points, and `len`.
fn segments(points: &[usize], len: usize) -> Vec<usize> {
    std::iter::once(0)
        .chain(points.iter().copied())
        .chain(std::iter::once(len))
        .collect()
}

/// The merge step: the weakest point (the largest p-value at or above `max_p`, else the
/// smallest magnitude at or below `min_magnitude`) removed and the rest re-tested, until every
/// point left is strong.
fn merge(mut points: Vec<usize>, series: &[f64], settings: &Settings) -> Vec<ChangePoint> {
    loop {
        let tested = test_all(&points, series);
        let by_p = tested
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.p_value.total_cmp(&b.1.p_value));
        let Some((mut weakest, point)) = by_p else {
            return tested;
        };
        if point.p_value < settings.max_p {
            let (i, smallest) = tested
                .iter()
                .enumerate()
                .min_by(|a, b| a.1.magnitude().total_cmp(&b.1.magnitude()))
                .expect("not empty");
            if smallest.magnitude() > settings.min_magnitude {
                return tested;
            }
            weakest = i;
        }
        points.remove(weakest);
    }
}

/// Every point tested between its neighbours.
fn test_all(points: &[usize], series: &[f64]) -> Vec<ChangePoint> {
    let bounds = segments(points, series.len());
    bounds
        .windows(3)
        .map(|b| {
            let (before, after) = (&series[b[0]..b[1]], &series[b[1]..b[2]]);
            ChangePoint {
                index: b[1],
                mean_before: mean(before),
                mean_after: mean(after),
                p_value: t_test(before, after),
            }
        })
        .collect()
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Two-sided p-value of Student's pooled t-test, as Otava computes it (scipy's
/// `ttest_ind_from_stats` given the population standard deviations). 1 when there is nothing
/// to test; 0 for different means without any spread.
fn t_test(a: &[f64], b: &[f64]) -> f64 {
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    if a.is_empty() || b.is_empty() || n1 + n2 <= 2.0 {
        return 1.0;
    }
    let var = |xs: &[f64]| {
        let m = mean(xs);
        xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / xs.len() as f64
    };
    let df = n1 + n2 - 2.0;
    let pooled = ((n1 - 1.0) * var(a) + (n2 - 1.0) * var(b)) / df;
    let se = (pooled * (1.0 / n1 + 1.0 / n2)).sqrt();
    let diff = mean(a) - mean(b);
    if se == 0.0 {
        return if diff == 0.0 { 1.0 } else { 0.0 };
    }
    let t = StudentsT::new(0.0, 1.0, df).expect("positive degrees of freedom");
    2.0 * t.sf((diff / se).abs())
}

/// Sums of |x_i − x_j| over rectangles of index pairs, each in O(1) from 2-D prefix sums, so
/// one window's every split is O(n²) (Otava's cumulative sums do the same in numpy).
struct PairSums {
    n: usize,
    /// `prefix[(i, j)]`: the sum over rows < i and columns < j, row-major (n + 1)².
    prefix: Vec<f64>,
}

impl PairSums {
    fn new(xs: &[f64]) -> Self {
        let n = xs.len();
        let mut prefix = vec![0.0; (n + 1) * (n + 1)];
        for i in 0..n {
            for j in 0..n {
                prefix[(i + 1) * (n + 1) + j + 1] = (xs[i] - xs[j]).abs()
                    + prefix[i * (n + 1) + j + 1]
                    + prefix[(i + 1) * (n + 1) + j]
                    - prefix[i * (n + 1) + j];
            }
        }
        PairSums { n, prefix }
    }

    /// Σ |x_i − x_j| over rows `r` and columns `c`.
    fn block(&self, r: std::ops::Range<usize>, c: std::ops::Range<usize>) -> f64 {
        let at = |i: usize, j: usize| self.prefix[i * (self.n + 1) + j];
        at(r.end, c.end) - at(r.start, c.end) - at(r.end, c.start) + at(r.start, c.start)
    }

    /// The best split τ of `start..end` and its q̂: the maximum over τ < κ ≤ end of
    /// Q(x[start..τ], x[τ..κ]).
    fn candidate(&self, start: usize, end: usize) -> Option<(usize, f64)> {
        let mut best: Option<(usize, f64)> = None;
        for tau in start + 1..end {
            for kappa in tau + 1..=end {
                let q = self.energy(start, tau, kappa);
                if best.is_none_or(|(_, b)| q > b) {
                    best = Some((tau, q));
                }
            }
        }
        best
    }

    /// Matteson & James's scaled energy distance between X = x[start..tau] and
    /// Y = x[tau..kappa].
    fn energy(&self, start: usize, tau: usize, kappa: usize) -> f64 {
        let (n, m) = ((tau - start) as f64, (kappa - tau) as f64);
        let cross = self.block(start..tau, tau..kappa);
        let within_x = self.block(start..tau, start..tau) / 2.0;
        let within_y = self.block(tau..kappa, tau..kappa) / 2.0;
        let mut q = 2.0 / (m + n) * cross;
        if n > 1.0 {
            q -= 2.0 * m / ((m + n) * (n - 1.0)) * within_x;
        }
        if m > 1.0 {
            q -= 2.0 * n / ((m + n) * (m - 1.0)) * within_y;
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// `n` draws around `level` with a relative spread `noise` (a uniform sum, near normal).
    fn noisy(rng: &mut rand::rngs::StdRng, n: usize, level: f64, noise: f64) -> Vec<f64> {
        (0..n)
            .map(|_| {
                let z: f64 = (0..12).map(|_| rng.random::<f64>()).sum::<f64>() - 6.0;
                level * (1.0 + noise * z)
            })
            .collect()
    }

    #[test]
    fn a_planted_ten_percent_slowdown_is_found_at_the_run_it_starts_with_its_size() {
        for seed in 0..20 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut series = noisy(&mut rng, 10, 100.0, 0.02);
            series.extend(noisy(&mut rng, 10, 110.0, 0.02));
            let found = change_points(&series, &Settings::default());
            assert_eq!(found.len(), 1, "seed {seed}: {found:?}");
            assert!(found[0].index.abs_diff(10) <= 1, "seed {seed}: {found:?}");
            assert!((found[0].change() - 0.10).abs() < 0.03, "{found:?}");
            assert!(found[0].p_value < 0.001);
        }
    }

    #[test]
    fn identical_runs_have_no_change_point() {
        let mut false_points = 0;
        for seed in 0..50 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let series = noisy(&mut rng, 20, 100.0, 0.05);
            false_points += change_points(&series, &Settings::default()).len();
        }
        // p < 0.001 per point: at most a stray one in 50 histories.
        assert!(
            false_points <= 1,
            "{false_points} change points in 50 A/A histories"
        );
        let flat = vec![7.0; 12];
        assert!(change_points(&flat, &Settings::default()).is_empty());
    }

    #[test]
    fn two_steps_are_two_change_points_and_a_step_back_is_one() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut series = noisy(&mut rng, 12, 100.0, 0.01);
        series.extend(noisy(&mut rng, 12, 130.0, 0.01));
        series.extend(noisy(&mut rng, 12, 100.0, 0.01));
        let found: Vec<usize> = change_points(&series, &Settings::default())
            .iter()
            .map(|c| c.index)
            .collect();
        assert_eq!(found, vec![12, 24]);
    }

    #[test]
    fn a_long_history_is_read_in_windows_and_still_finds_its_change() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut series = noisy(&mut rng, 70, 50.0, 0.02);
        series.extend(noisy(&mut rng, 60, 45.0, 0.02));
        let found = change_points(&series, &Settings::default());
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].index.abs_diff(70) <= 1);
        assert!((found[0].change() + 0.10).abs() < 0.02);
    }

    #[test]
    fn a_magnitude_floor_drops_significant_but_small_changes() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut series = noisy(&mut rng, 15, 100.0, 0.002);
        series.extend(noisy(&mut rng, 15, 102.0, 0.002));
        assert_eq!(change_points(&series, &Settings::default()).len(), 1);
        let floor = Settings {
            min_magnitude: 0.05,
            ..Settings::default()
        };
        assert!(change_points(&series, &floor).is_empty());
    }

    #[test]
    fn the_t_test_matches_scipy() {
        // scipy.stats.ttest_ind_from_stats over the population standard deviations, as Otava
        // calls it: p = 0.004370936728391019.
        let a = [9.0, 11.0, 10.0, 8.585786437626905, 11.414213562373096];
        let p = t_test(&a, &[12.0, 11.0, 13.0, 12.5, 11.5, 12.0]);
        assert!((p - 0.004370936728391019).abs() < 1e-9, "{p}");
        assert_eq!(t_test(&[1.0], &[2.0]), 1.0);
        assert_eq!(t_test(&[1.0, 1.0], &[2.0, 2.0]), 0.0);
    }
}
