//! Is it really different? A run's numbers against its baseline runs' with how sure each is:
//! per metric the change as a ratio with its 95% confidence interval, a p-value corrected for
//! the many metrics of one run (Benjamini–Hochberg), and a call — a regression, an improvement,
//! a provisional change, or "~ no significant change". Pure: the report supplies the measures.
//!
//! Where the variance comes from decides (Kalibera & Jones, ISMM 2013: most of it arises between
//! runs — a fresh server, its warm-up, the machine):
//! - **History** ([`MIN_HISTORY`] or more baseline runs have the metric): the runs' own spread,
//!   on the log scale, with a t-distribution of n − 1 degrees of freedom (a prediction of one
//!   new run from n), never below the spread of identical runs measured in the A/A (where that
//!   floor decides, with the degrees of freedom of the run's own batches: [`history_spread`]).
//! - **A pair** (one or two baseline runs): the within-run intervals of both runs (batch means,
//!   see [`BatchSpread`]) understate the run-to-run spread, so they are widened by what the
//!   project measured on itself in A/A runs (`RUN_TO_RUN`, [`PAIR_FLOOR`], docs/benchmarks.md):
//!   a call clears the widest run-to-run spread an identical pair showed, a change that clears
//!   only the typical one is *provisional*: reported, never a regression.
//!
//! A change is called only when it is significant after the correction and at least
//! `min_effect` in size: an A/A pair of identical runs reports no change.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// One number two runs are compared on, with how sure the run is of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Measure {
    /// e.g. `p99_ms Load`, `qps Infer/add_sub`, `capacity_qps grpc-clients/production/mix`,
    /// `queue_us_per_request add_sub`.
    pub metric: String,
    pub value: f64,
    /// QPS and capacity: a drop is bad; latencies and server times: a rise is.
    pub higher_is_better: bool,
    /// Its spread within the run, or why the run cannot say.
    pub spread: Result<BatchSpread, NoSpread>,
}

/// Why a run has no within-run spread of a value.
#[derive(Debug, Clone, PartialEq)]
pub enum NoSpread {
    /// Too few requests for its percentile: the value itself is noise (one slow request
    /// moves a p99 of 200 requests 30 times), so it is never judged, nor is it history.
    TooFewRequests(String),
    /// A number read once (memory at the end, a capacity answer) or a run too short for enough
    /// batches: judged from a history only.
    Once(String),
}

impl std::fmt::Display for NoSpread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoSpread::TooFewRequests(why) | NoSpread::Once(why) => f.write_str(why),
        }
    }
}

impl Measure {
    /// Whether its value says anything: not a percentile of too few requests.
    pub fn usable(&self) -> bool {
        !matches!(self.spread, Err(NoSpread::TooFewRequests(_)))
    }
}

/// A value's spread within its run: the relative standard error of the mean of its batches
/// (the run cut into equal spans of time, each batch's value computed from its merged
/// histograms or counters, never from averaged percentiles).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BatchSpread {
    /// Standard error over the value (0.02: ±2% is one standard error).
    pub rel_se: f64,
    pub batches: u32,
}

/// Fewer full batches than this and a run cannot estimate its own spread (a t-distribution of
/// 5 degrees of freedom at the least: a 20 s run of 2 s intervals has 8).
pub const MIN_BATCHES: usize = 6;

/// With this many baseline runs or more, their own spread decides.
pub const MIN_HISTORY: usize = 3;

/// A/A (docs/benchmarks.md, 2026-12-03: two benchmarks of 20 runs of the smoke matrix, their 38
/// consecutive pairs): per kind of metric (its name's first word), the squared log change between
/// two identical runs over the pair's within-run variance, at the 90th percentile of the pairs (a
/// provisional call clears it) and at their 95th (a regression or improvement clears it; the
/// 99th, set by a few sequence scenarios whose rate two identical runs halve or double, would
/// leave a pair blind to any QPS change of the others). The within-run intervals understate the
/// run-to-run spread by these factors: a fresh server, its warm-up and the machine move a run more
/// than its own batches show.
const RUN_TO_RUN: &[(&str, f64, f64)] = &[
    ("qps", 4.1, 10.3),
    ("p50_ms", 14.0, 19.0),
    ("p90_ms", 38.0, 45.0),
    ("p99_ms", 31.0, 43.0),
    ("queue_us_per_request", 26.0, 48.0),
    ("compute_us_per_request", 28.0, 47.0),
];

/// A kind the A/A did not measure: the widest of those it did.
const RUN_TO_RUN_OTHER: (f64, f64) = (38.0, 48.0);

/// The relative run-to-run spread of one run left when its within-run interval is tiny (a fresh
/// server's warm-up, the machine): one standard deviation.
pub const PAIR_FLOOR: f64 = 0.02;

/// How much a pair's within-run variance of `metric` is widened: (provisional, called).
fn run_to_run(metric: &str) -> (f64, f64) {
    let kind = metric.split(' ').next().unwrap_or_default();
    RUN_TO_RUN
        .iter()
        .find(|(k, _, _)| *k == kind)
        .map_or(RUN_TO_RUN_OTHER, |&(_, typical, worst)| (typical, worst))
}

/// The relative standard error of one run's value of `metric` as a run of the same
/// configuration on a fresh server would scatter around it: its within-run `rel_se` widened by
/// the A/A's typical run-to-run factor, never below [`PAIR_FLOOR`] (as one side of a pair is in
/// [`compare`]). For a number a single run stands for, as a sweep's variant does.
pub fn one_run_rel_se(metric: &str, rel_se: f64) -> f64 {
    (run_to_run(metric).0 * rel_se.powi(2) + PAIR_FLOOR.powi(2)).sqrt()
}

/// The false discovery rate over one run's metrics.
pub const ALPHA: f64 = 0.05;

impl BatchSpread {
    /// The spread of `value` from its batches' values: None with fewer than [`MIN_BATCHES`] or
    /// a value that is not positive.
    pub fn of_batches(batches: &[f64], value: f64) -> Option<BatchSpread> {
        let n = batches.len();
        if n < MIN_BATCHES || value.is_nan() || value <= 0.0 {
            return None;
        }
        let mean = batches.iter().sum::<f64>() / n as f64;
        let var = batches.iter().map(|b| (b - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        Some(BatchSpread {
            rel_se: var.sqrt() / (n as f64).sqrt() / value,
            batches: n as u32,
        })
    }

    /// The value's 95% interval, relative (−0.04, 0.04: ±4%).
    pub fn interval(&self) -> (f64, f64) {
        let half = t_quantile(f64::from(self.batches) - 1.0) * self.rel_se;
        (-half, half)
    }
}

/// A measure as report.json `estimates[]` shows it: the value and its 95% interval within the
/// run (relative bounds, `low` −0.04 is 4% below), or why the run cannot give one.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub metric: String,
    pub value: f64,
    /// QPS and capacity: a fall is the regression (latencies: a rise).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub higher_is_better: bool,
    pub low: Option<f64>,
    pub high: Option<f64>,
    pub spread: Option<BatchSpread>,
    pub not_judged: Option<String>,
    /// A percentile of too few requests ([`NoSpread::TooFewRequests`]): shown, but no change
    /// point, repeat or comparison reads it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub too_few_requests: bool,
}

impl Estimate {
    /// A value without an interval: one number per run (or a test's history).
    pub fn bare(metric: &str, value: f64, higher_is_better: bool) -> Self {
        Estimate {
            metric: metric.into(),
            value,
            higher_is_better,
            low: None,
            high: None,
            spread: None,
            not_judged: None,
            too_few_requests: false,
        }
    }
}

impl From<&Measure> for Estimate {
    fn from(m: &Measure) -> Self {
        let interval = m.spread.as_ref().ok().map(BatchSpread::interval);
        Estimate {
            metric: m.metric.clone(),
            value: m.value,
            higher_is_better: m.higher_is_better,
            low: interval.map(|(low, _)| low),
            high: interval.map(|(_, high)| high),
            spread: m.spread.as_ref().ok().copied(),
            not_judged: m.spread.as_ref().err().map(ToString::to_string),
            too_few_requests: !m.usable(),
        }
    }
}

/// What a change is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Call {
    /// Worse, beyond the run-to-run spread and `min_effect`.
    #[default]
    Regression,
    /// Better, likewise.
    Improvement,
    /// Beyond the within-run intervals of a pair only: for information.
    Provisional,
    /// "~": not significant, or smaller than `min_effect`.
    NoChange,
}

/// One metric compared (report.json `regressions[]` and `baseline.changes[]`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub metric: String,
    /// The baseline's value (the geometric mean of the baseline runs').
    pub baseline: f64,
    pub current: f64,
    /// current / baseline − 1: +0.25 is 25% more.
    pub change: f64,
    /// The change's 95% confidence interval.
    #[serde(default)]
    pub low: f64,
    #[serde(default)]
    pub high: f64,
    /// Its p-value corrected over the run's metrics (Benjamini–Hochberg).
    #[serde(default)]
    pub q_value: f64,
    #[serde(default)]
    pub call: Call,
    #[serde(default)]
    pub higher_is_better: bool,
    /// Groups of repeated runs: the two-sided p-value of a rank test (Mann–Whitney U, exact)
    /// over the runs' values, beside the t-test's.
    pub rank_p: Option<f64>,
}

impl Finding {
    /// `p99_ms Load: slower by 12.0% [8.1%, 16.2%] (10.000 -> 11.200, q=0.003)`.
    pub fn describe(&self) -> String {
        let word = match (self.change >= 0.0, self.higher_is_better) {
            (true, true) => "higher",
            (false, true) => "lower",
            (true, false) => "slower",
            (false, false) => "faster",
        };
        let word = if self.metric.starts_with("p") && self.metric.contains("_ms") {
            word
        } else {
            match word {
                "slower" => "higher",
                "faster" => "lower",
                w => w,
            }
        };
        format!(
            "{}: {word} by {:.1}% [{:+.1}%, {:+.1}%] ({:.3} -> {:.3}, q={:.3})",
            self.metric,
            self.change.abs() * 100.0,
            self.low * 100.0,
            self.high * 100.0,
            self.baseline,
            self.current,
            self.q_value
        )
    }

    /// Whether it is worse (a rise where higher is bad, a drop where it is good).
    pub fn worse(&self) -> bool {
        (self.change > 0.0) != self.higher_is_better
    }
}

/// A metric both sides have that could not be judged, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotJudged {
    pub metric: String,
    pub why: String,
}

/// Every metric of `current` that the baseline runs have, judged.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Judged {
    /// Every judged metric, in `current`'s order.
    pub changes: Vec<Finding>,
    pub not_judged: Vec<NotJudged>,
}

/// One metric's test before the correction.
struct Test {
    finding: Finding,
    /// Two-sided p-value on the run-to-run spread.
    p: f64,
    /// A pair's two-sided p-value on its typical run-to-run spread (provisional).
    p_within: Option<f64>,
}

/// `current` against `window` (each baseline run's measures, newest first), `min_effect`: the
/// smallest change worth a call (0.1 = 10%).
pub fn compare(window: &[Vec<Measure>], current: &[Measure], min_effect: f64) -> Judged {
    let mut tests = Vec::new();
    let mut not_judged = Vec::new();
    for m in current {
        let base: Vec<&Measure> = window
            .iter()
            .filter_map(|run| run.iter().find(|b| b.metric == m.metric))
            .filter(|b| b.usable())
            .collect();
        if base.is_empty() {
            continue;
        }
        if let Err(NoSpread::TooFewRequests(why)) = &m.spread {
            not_judged.push(NotJudged {
                metric: m.metric.clone(),
                why: why.clone(),
            });
            continue;
        }
        match test(m, &base) {
            Ok(t) => tests.push(t),
            Err(why) => not_judged.push(NotJudged {
                metric: m.metric.clone(),
                why,
            }),
        }
    }
    call(tests, not_judged, min_effect)
}

/// The calls over one run's tests: Benjamini–Hochberg over their p-values, then significance
/// and `min_effect`; a pair's change significant on its within-run intervals only is
/// provisional.
fn call(tests: Vec<Test>, not_judged: Vec<NotJudged>, min_effect: f64) -> Judged {
    let q = benjamini_hochberg(&tests.iter().map(|t| t.p).collect::<Vec<_>>());
    let q_within = benjamini_hochberg(
        &tests
            .iter()
            .map(|t| t.p_within.unwrap_or(1.0))
            .collect::<Vec<_>>(),
    );
    let changes = tests
        .into_iter()
        .zip(q.into_iter().zip(q_within))
        .map(|(t, (q, q_within))| {
            let mut f = t.finding;
            let big = f.change.abs() >= min_effect;
            f.q_value = q;
            f.call = if big && q <= ALPHA {
                if f.worse() {
                    Call::Regression
                } else {
                    Call::Improvement
                }
            } else if big && t.p_within.is_some() && q_within <= ALPHA {
                f.q_value = q_within;
                Call::Provisional
            } else {
                Call::NoChange
            };
            f
        })
        .collect();
    Judged {
        changes,
        not_judged,
    }
}

/// One metric against its baseline values: on the history's spread with [`MIN_HISTORY`] runs or
/// more, else on both runs' within-run spreads widened by the A/A measurement.
fn test(m: &Measure, base: &[&Measure]) -> Result<Test, String> {
    let logs: Vec<f64> = base.iter().map(|b| b.value.ln()).collect();
    let n = logs.len() as f64;
    let center = logs.iter().sum::<f64>() / n;
    let d = m.value.ln() - center;
    let (se, df, p_within) = if logs.len() >= MIN_HISTORY {
        let (per_run, df) = history_spread(&m.metric, &logs, center, m.spread.as_ref().ok());
        ((per_run * (1.0 + 1.0 / n)).sqrt(), df, None)
    } else {
        let current = m.spread.as_ref().map_err(|why| {
            format!("{why}; judged once the history has {MIN_HISTORY} comparable runs")
        })?;
        let mut var = current.rel_se.powi(2);
        let mut batches = current.batches;
        for b in base {
            let s = b
                .spread
                .as_ref()
                .map_err(|why| format!("the baseline's: {why}"))?;
            var += s.rel_se.powi(2) / (n * n);
            batches = batches.min(s.batches);
        }
        let df = f64::from(batches) - 1.0;
        let (typical, worst) = run_to_run(&m.metric);
        let floor = PAIR_FLOOR.powi(2) * (1.0 + 1.0 / n);
        let se_typical = (typical * var + floor).sqrt();
        let se = (worst * var + floor).sqrt();
        (se, df, Some(p_two_sided(d / se_typical, df)))
    };
    Ok(Test {
        finding: finding(m, center, m.value.ln(), t_quantile(df) * se, None),
        p: p_two_sided(d / se, df),
        p_within,
    })
}

/// One run's variance (log scale) as a history of baseline runs (`logs`, their mean `center`)
/// predicts it, and the degrees of freedom of its t-distribution. Never below what identical
/// runs showed in the A/A (the current run's within-run spread widened by the A/A's widest
/// run-to-run factor, and [`PAIR_FLOOR`]): a few nights that happen to agree closely would
/// otherwise make a noisy machine's next run a regression. The degrees of freedom are those of
/// the variance that decides: the history's own (n − 1) where it is the largest, else the
/// current run's batches' (the A/A's factor and the floor are constants measured once, not
/// estimated from these few runs): a floor taken with n − 1 = 2 degrees of freedom left a
/// +170% p50 against three steady runs uncalled (q = 0.051).
fn history_spread(
    metric: &str,
    logs: &[f64],
    center: f64,
    within_current: Option<&BatchSpread>,
) -> (f64, f64) {
    let n = logs.len() as f64;
    let s2 = logs.iter().map(|x| (x - center).powi(2)).sum::<f64>() / (n - 1.0);
    let rel_se = within_current.map_or(0.0, |w| w.rel_se);
    let floor = (run_to_run(metric).1 * rel_se.powi(2)).max(PAIR_FLOOR.powi(2));
    match within_current {
        Some(w) if floor > s2 => (floor, (f64::from(w.batches) - 1.0).max(n - 1.0)),
        _ => (s2.max(floor), n - 1.0),
    }
}

/// Two groups of repeated runs of one matrix (A/B: each side's runs, e.g. the interleaved blocks
/// of two server builds): per metric, B's geometric mean over A's with Welch's t on the runs'
/// logs (the runs' own spread, never below the A/A floor) and an exact Mann–Whitney U p-value
/// beside it. A side with a single run is a pair ([`compare`]).
pub fn compare_groups(a: &[Vec<Measure>], b: &[Vec<Measure>], min_effect: f64) -> Judged {
    let mut judged = match b.first() {
        Some(current) if a.len() < 2 || b.len() < 2 => compare(a, current, min_effect),
        Some(_) => compare_repeats(a, b, min_effect),
        None => Judged::default(),
    };
    judged.not_judged.extend(unshared(a, b));
    judged
}

/// The metrics only one side measured (a model only one side sent to, a run that sent
/// nothing), each not judged in those words.
fn unshared(a: &[Vec<Measure>], b: &[Vec<Measure>]) -> Vec<NotJudged> {
    let names = |runs: &[Vec<Measure>]| -> std::collections::BTreeSet<String> {
        runs.iter().flatten().map(|m| m.metric.clone()).collect()
    };
    let (in_a, in_b) = (names(a), names(b));
    let only = |mine: &std::collections::BTreeSet<String>, theirs, side: &str| {
        mine.difference(theirs)
            .map(|metric| NotJudged {
                metric: metric.clone(),
                why: format!("measured in {side} only"),
            })
            .collect::<Vec<_>>()
    };
    let mut out = only(&in_a, &in_b, "A");
    out.extend(only(&in_b, &in_a, "B"));
    out
}

/// Groups of two runs or more each: Welch's t on the runs' log values, a rank test beside.
fn compare_repeats(a: &[Vec<Measure>], b: &[Vec<Measure>], min_effect: f64) -> Judged {
    let mut tests = Vec::new();
    let values = |runs: &[Vec<Measure>], metric: &str| -> Vec<f64> {
        runs.iter()
            .filter_map(|run| run.iter().find(|m| m.metric == metric))
            .filter(|m| m.usable())
            .map(|m| m.value.ln())
            .collect()
    };
    for m in &b[0] {
        let (xa, xb) = (values(a, &m.metric), values(b, &m.metric));
        if xa.len() < 2 || xb.len() < 2 {
            continue;
        }
        let (ma, va) = mean_var(&xa);
        let (mb, vb) = mean_var(&xb);
        let floor = PAIR_FLOOR.powi(2);
        let (sa, sb) = (
            va.max(floor) / xa.len() as f64,
            vb.max(floor) / xb.len() as f64,
        );
        let se = (sa + sb).sqrt();
        // Welch–Satterthwaite.
        let df = (sa + sb).powi(2)
            / (sa.powi(2) / (xa.len() - 1) as f64 + sb.powi(2) / (xb.len() - 1) as f64);
        let d = mb - ma;
        let rank_p = Some(mann_whitney_p(&xa, &xb));
        tests.push(Test {
            finding: finding(m, ma, mb, t_quantile(df) * se, rank_p),
            p: p_two_sided(d / se, df),
            p_within: None,
        });
    }
    call(tests, Vec::new(), min_effect)
}

/// The change of `m` from `baseline` to `current` (logs), its interval `current − baseline ±
/// half`, before the calls.
fn finding(m: &Measure, baseline: f64, current: f64, half: f64, rank_p: Option<f64>) -> Finding {
    let d = current - baseline;
    Finding {
        metric: m.metric.clone(),
        baseline: baseline.exp(),
        current: current.exp(),
        change: d.exp_m1(),
        low: (d - half).exp_m1(),
        high: (d + half).exp_m1(),
        q_value: 1.0,
        call: Call::NoChange,
        higher_is_better: m.higher_is_better,
        rank_p,
    }
}

fn mean_var(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var)
}

/// The exact two-sided p-value of the Mann–Whitney U test of `a` against `b` (small samples:
/// every way of splitting the pooled ranks is counted; ties count half).
fn mann_whitney_p(a: &[f64], b: &[f64]) -> f64 {
    let u = |a: &[f64], b: &[f64]| -> f64 {
        a.iter()
            .map(|x| {
                b.iter()
                    .map(|y| match x.total_cmp(y) {
                        std::cmp::Ordering::Greater => 1.0,
                        std::cmp::Ordering::Equal => 0.5,
                        std::cmp::Ordering::Less => 0.0,
                    })
                    .sum::<f64>()
            })
            .sum()
    };
    let observed = u(a, b);
    let center = (a.len() * b.len()) as f64 / 2.0;
    let pooled: Vec<f64> = a.iter().chain(b).copied().collect();
    let n = pooled.len();
    if n > 20 {
        // 2^20 splits at most; beyond, the normal approximation.
        let sd = ((a.len() * b.len() * (n + 1)) as f64 / 12.0).sqrt();
        let z = (observed - center).abs() / sd;
        return 2.0 * (1.0 - students_t(1e6).cdf(z));
    }
    let (mut extreme, mut total) = (0u64, 0u64);
    for mask in 0u32..(1 << n) {
        if mask.count_ones() as usize != a.len() {
            continue;
        }
        let (xs, ys): (Vec<f64>, Vec<f64>) = {
            let mut xs = Vec::new();
            let mut ys = Vec::new();
            for (i, v) in pooled.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    xs.push(*v);
                } else {
                    ys.push(*v);
                }
            }
            (xs, ys)
        };
        total += 1;
        if (u(&xs, &ys) - center).abs() >= (observed - center).abs() - 1e-9 {
            extreme += 1;
        }
    }
    extreme as f64 / total as f64
}

/// Student's t, `df` degrees of freedom (at least 1).
fn students_t(df: f64) -> StudentsT {
    StudentsT::new(0.0, 1.0, df.max(1.0)).expect("positive degrees of freedom")
}

/// The 97.5th percentile: half a 95% interval in standard errors.
pub(crate) fn t_quantile(df: f64) -> f64 {
    students_t(df).inverse_cdf(0.975)
}

fn p_two_sided(t: f64, df: f64) -> f64 {
    if !t.is_finite() {
        return if t.is_nan() { 1.0 } else { 0.0 };
    }
    2.0 * (1.0 - students_t(df).cdf(t.abs()))
}

/// Benjamini–Hochberg adjusted p-values (q-values), in the input's order.
fn benjamini_hochberg(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut q = vec![1.0; m];
    let mut running = 1.0f64;
    for (rank, &i) in order.iter().enumerate().rev() {
        running = running.min(p[i] * m as f64 / (rank + 1) as f64);
        q[i] = running.min(1.0);
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(metric: &str, value: f64, rel_se: f64) -> Measure {
        Measure {
            metric: metric.into(),
            value,
            higher_is_better: metric.starts_with("qps"),
            spread: Ok(BatchSpread {
                rel_se,
                batches: 18,
            }),
        }
    }

    /// A p99 of too few requests: one slow request moves it 30 times (an A/A run's
    /// SequenceValidValid p99 went from 2 ms to 61 ms with 241 requests); neither judged nor
    /// taken as history.
    #[test]
    fn a_percentile_of_too_few_requests_is_never_judged_nor_history() {
        let few = |value| Measure {
            spread: Err(NoSpread::TooFewRequests(
                "not judged: 241 requests, as few as 19 in a batch".into(),
            )),
            ..m("p99_ms SequenceValidValid", value, 0.0)
        };
        let window: Vec<Vec<Measure>> = [2.0, 2.1, 1.9, 2.0, 2.05]
            .map(|v| vec![m("p99_ms SequenceValidValid", v, 0.02)])
            .to_vec();
        assert!(Estimate::from(&few(61.0)).too_few_requests);
        assert!(!Estimate::from(&window[0][0]).too_few_requests);
        let judged = compare(&window, &[few(61.0)], 0.1);
        assert!(judged.changes.is_empty(), "{:?}", judged.changes);
        assert_eq!(judged.not_judged.len(), 1);
        assert!(judged.not_judged[0].why.contains("241 requests"));
        // A baseline run's unreliable p99 is no history: the other four decide.
        let mut noisy = window.clone();
        noisy[2] = vec![few(60.0)];
        let judged = compare(&noisy, &[m("p99_ms SequenceValidValid", 2.02, 0.02)], 0.1);
        assert_eq!(
            calls(&judged),
            vec![("p99_ms SequenceValidValid", Call::NoChange)]
        );
        let judged = compare(&noisy, &[m("p99_ms SequenceValidValid", 4.0, 0.02)], 0.1);
        assert_eq!(
            calls(&judged),
            vec![("p99_ms SequenceValidValid", Call::Regression)]
        );
    }

    fn calls(j: &Judged) -> Vec<(&str, Call)> {
        j.changes
            .iter()
            .map(|c| (c.metric.as_str(), c.call))
            .collect()
    }

    #[test]
    fn batch_means_give_the_spread_and_need_enough_batches() {
        let batches = [9.0, 11.0, 10.0, 10.0, 9.0, 11.0, 10.0, 10.0, 9.0, 11.0];
        let s = BatchSpread::of_batches(&batches, 10.0).expect("ten batches");
        // sd = sqrt(6/9) = 0.816; se = 0.816 / sqrt(10) = 0.258; over 10.
        assert!((s.rel_se - 0.0258).abs() < 1e-3, "{s:?}");
        let (lo, hi) = s.interval();
        assert!(
            (hi - 2.262 * s.rel_se).abs() < 1e-3 && lo == -hi,
            "t(9) = 2.262"
        );
        assert!(BatchSpread::of_batches(&batches[..MIN_BATCHES], 10.0).is_some());
        assert_eq!(
            BatchSpread::of_batches(&batches[..MIN_BATCHES - 1], 10.0),
            None
        );
    }

    #[test]
    fn identical_runs_are_no_change() {
        let run = vec![m("p99_ms Load", 10.0, 0.02), m("qps Load", 1000.0, 0.01)];
        let j = compare(std::slice::from_ref(&run), &run, 0.1);
        assert_eq!(
            calls(&j),
            [
                ("p99_ms Load", Call::NoChange),
                ("qps Load", Call::NoChange)
            ]
        );
        assert!(j.changes.iter().all(|c| c.low < 0.0 && c.high > 0.0));
    }

    #[test]
    fn a_pair_calls_a_clear_change_and_leaves_noise_alone() {
        let before = vec![
            m("p50_ms Infer/slow_model", 10.0, 0.005),
            m("p99_ms CrashingClient", 100.0, 0.15),
            m("qps Load", 1000.0, 0.01),
        ];
        let after = vec![
            // 20% slower, tight intervals: a regression.
            m("p50_ms Infer/slow_model", 12.0, 0.005),
            // +40% on a metric whose batches spread ±15% (se): noise.
            m("p99_ms CrashingClient", 140.0, 0.15),
            // -3%: below min_effect.
            m("qps Load", 970.0, 0.001),
        ];
        let j = compare(&[before], &after, 0.1);
        assert_eq!(
            calls(&j),
            [
                ("p50_ms Infer/slow_model", Call::Regression),
                ("p99_ms CrashingClient", Call::NoChange),
                ("qps Load", Call::NoChange),
            ]
        );
        let slow = &j.changes[0];
        assert!((slow.change - 0.2).abs() < 1e-9);
        assert!(
            slow.low > 0.0 && slow.low < 0.2 && slow.high > 0.2,
            "{slow:?}"
        );
        assert_eq!(
            slow.describe(),
            format!(
                "p50_ms Infer/slow_model: slower by 20.0% [{:+.1}%, {:+.1}%] (10.000 -> 12.000, q={:.3})",
                slow.low * 100.0,
                slow.high * 100.0,
                slow.q_value
            )
        );
    }

    #[test]
    fn a_pair_change_beyond_the_typical_run_to_run_spread_only_is_provisional() {
        // QPS -10% where each run says ±1% (se): beyond the typical spread of identical pairs
        // (x 4.1 the variance), inside the widest called (x 10.3).
        let j = compare(
            &[vec![m("qps Load", 1000.0, 0.01)]],
            &[m("qps Load", 900.0, 0.01)],
            0.05,
        );
        assert_eq!(calls(&j), [("qps Load", Call::Provisional)]);
        // -40%: beyond the widest too.
        let j = compare(
            &[vec![m("qps Load", 1000.0, 0.01)]],
            &[m("qps Load", 600.0, 0.01)],
            0.1,
        );
        assert_eq!(calls(&j), [("qps Load", Call::Regression)]);
    }

    #[test]
    fn a_history_judges_by_its_own_spread() {
        // p99 over five nights, noisy: 10 ± 2 ms.
        let nights: Vec<Vec<Measure>> = [10.0, 12.5, 8.0, 11.0, 9.5]
            .iter()
            .map(|&v| vec![m("p99_ms Load", v, 0.01)])
            .collect();
        let within = compare(&nights, &[m("p99_ms Load", 13.0, 0.01)], 0.1);
        assert_eq!(
            calls(&within),
            [("p99_ms Load", Call::NoChange)],
            "+30%, in its spread"
        );
        let beyond = compare(&nights, &[m("p99_ms Load", 25.0, 0.01)], 0.1);
        assert_eq!(calls(&beyond), [("p99_ms Load", Call::Regression)]);
        // Steady nights (±0.5%): a 12% change is real.
        let steady: Vec<Vec<Measure>> = [100.0, 100.5, 99.5, 100.2]
            .iter()
            .map(|&v| vec![m("qps Load", v, 0.01)])
            .collect();
        let drop = compare(&steady, &[m("qps Load", 88.0, 0.01)], 0.1);
        assert_eq!(calls(&drop), [("qps Load", Call::Regression)]);
        let rise = compare(&steady, &[m("qps Load", 115.0, 0.01)], 0.1);
        assert_eq!(calls(&rise), [("qps Load", Call::Improvement)]);
    }

    /// Three steady nights (p50 2.0-2.1 ms, each ±1-2% within) and a night at 5.5 ms: the
    /// A/A floor (the current run's within-run spread, widened) decides the spread, and it is a
    /// constant, not an estimate from three runs, so two degrees of freedom would be a blind
    /// spot (this one, measured on a model made 2 ms slower, was left uncalled at q = 0.051).
    /// A change inside the floor stays "~".
    #[test]
    fn a_steady_history_judges_by_the_a_a_floor_with_the_current_runs_degrees_of_freedom() {
        let nights: Vec<Vec<Measure>> = [(2.041, 0.012), (1.995, 0.009), (2.095, 0.022)]
            .iter()
            .map(|&(v, se)| vec![m("p50_ms Infer", v, se)])
            .collect();
        let slower = Measure {
            spread: Ok(BatchSpread {
                rel_se: 0.026,
                batches: 12,
            }),
            ..m("p50_ms Infer", 5.531, 0.026)
        };
        let others: Vec<Measure> = (0..11)
            .map(|i| m(&format!("qps Other{i}"), 100.0, 0.01))
            .collect();
        let history: Vec<Vec<Measure>> = nights
            .iter()
            .map(|night| [night.clone(), others.clone()].concat())
            .collect();
        let j = compare(
            &history,
            &[vec![slower.clone()], others.clone()].concat(),
            0.1,
        );
        assert_eq!(
            calls(&j)[0],
            ("p50_ms Infer", Call::Regression),
            "{:#?}",
            j.changes[0]
        );
        // +15%, within what identical runs do: no call.
        let near = Measure {
            value: 2.043 * 1.15,
            ..slower
        };
        let j = compare(&history, &[vec![near], others].concat(), 0.1);
        assert_eq!(calls(&j)[0], ("p50_ms Infer", Call::NoChange));
    }

    #[test]
    fn a_metric_without_a_within_run_spread_waits_for_a_history() {
        let mut memory = m("server_rss_mb triton-0", 500.0, 0.0);
        memory.spread = Err(NoSpread::Once("read once, at the end".into()));
        let j = compare(&[vec![memory.clone()]], &[memory.clone()], 0.1);
        assert!(j.changes.is_empty());
        assert_eq!(j.not_judged.len(), 1);
        assert!(
            j.not_judged[0]
                .why
                .starts_with("read once, at the end; judged once")
        );
        let mut grown = memory.clone();
        grown.value = 800.0;
        let history = vec![vec![memory.clone()], vec![memory.clone()], vec![memory]];
        let j = compare(&history, &[grown], 0.1);
        assert_eq!(calls(&j), [("server_rss_mb triton-0", Call::Regression)]);
    }

    #[test]
    fn many_metrics_are_corrected_for_multiple_comparisons() {
        // One of 60 metrics 9% off at a p-value under 0.05 on its own: alone a regression,
        // among 60 with nothing else moving a false discovery.
        let before: Vec<Measure> = (0..60)
            .map(|i| m(&format!("p50_ms S{i}"), 10.0, 0.002))
            .collect();
        let mut after = before.clone();
        after[0].value = 10.9;
        let alone = compare(&[before[..1].to_vec()], &after[..1], 0.05);
        assert_eq!(calls(&alone), [("p50_ms S0", Call::Regression)]);
        let j = compare(&[before], &after, 0.05);
        assert_eq!(j.changes[0].call, Call::NoChange, "{:?}", j.changes[0]);
        assert!(j.changes[0].q_value > ALPHA);
    }

    #[test]
    fn groups_of_repeats_judge_by_their_runs_spread_with_a_rank_test_beside() {
        let runs = |values: &[f64]| -> Vec<Vec<Measure>> {
            values
                .iter()
                .map(|&v| vec![m("p50_ms Load", v, 0.01)])
                .collect()
        };
        let a = runs(&[10.0, 10.2, 9.9, 10.1]);
        let slower = compare_groups(&a, &runs(&[12.0, 12.1, 11.9, 12.2]), 0.1);
        let f = &slower.changes[0];
        assert_eq!(f.call, Call::Regression, "{f:?}");
        assert!(f.low > 0.1 && f.high < 0.3, "{f:?}");
        // Every B above every A: the most extreme of C(8,4) = 70 splits, two-sided.
        assert!((f.rank_p.unwrap() - 2.0 / 70.0).abs() < 1e-12, "{f:?}");
        let same = compare_groups(&a, &runs(&[10.1, 9.9, 10.2, 10.0]), 0.1);
        assert_eq!(same.changes[0].call, Call::NoChange);
        assert!(same.changes[0].rank_p.unwrap() > 0.5);
    }

    /// Runs that share no metric (another matrix's models, a run that sent nothing) judge
    /// nothing and say what each side measured alone; shared metrics are judged beside them.
    #[test]
    fn metrics_one_side_measured_alone_are_not_judged_and_say_so() {
        let a = vec![vec![
            m("p50_ms Load", 10.0, 0.01),
            m("qps Load", 500.0, 0.01),
        ]];
        let b = vec![vec![
            m("p50_ms Infer", 10.0, 0.01),
            m("qps Load", 501.0, 0.01),
        ]];
        let j = compare_groups(&a, &b, 0.1);
        assert_eq!(calls(&j), [("qps Load", Call::NoChange)]);
        let said: Vec<(&str, &str)> = j
            .not_judged
            .iter()
            .map(|n| (n.metric.as_str(), n.why.as_str()))
            .collect();
        assert_eq!(
            said,
            [
                ("p50_ms Load", "measured in A only"),
                ("p50_ms Infer", "measured in B only")
            ]
        );
        let nothing = compare_groups(&a, &[vec![]], 0.1);
        assert!(nothing.changes.is_empty());
        assert_eq!(nothing.not_judged.len(), 2);
    }

    #[test]
    fn benjamini_hochberg_matches_its_definition() {
        let q = benjamini_hochberg(&[0.01, 0.04, 0.03, 0.5]);
        // Sorted 0.01, 0.03, 0.04, 0.5: 0.04, 0.053, 0.053, 0.5.
        let want = [0.04, 0.04 * 4.0 / 3.0, 0.04 * 4.0 / 3.0, 0.5];
        for (got, want) in q.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{q:?}");
        }
    }
}
