//! Capacity mode: a controller per client group drives the group's total closed-loop
//! concurrency toward a p99 target: slow start (doubling) until the first sign of congestion,
//! a bisection of the bracket that found, then AIMD around the knee ([`SearchStep`]). Every check the driver turns the workers' cumulative
//! per-model counts into the exact histogram of the window since the last check
//! ([`WindowMeter`]), the controller judges it ([`Controller::check`]) and says the next
//! concurrency, which the driver splits across the group's workers ([`split`]) and writes to the
//! store, where each worker picks up its share live. Everything here is pure: the run loop only
//! feeds windows in and writes targets out.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use stress_common::histogram::LatencyHistogram;
use stress_common::status::ModelCounts;

use crate::plan::capacity::ControllerConfig;

/// Fewer answered requests than this in a window and its p99 is not judged (the window is
/// extended by the next check instead: nothing is thrown away).
pub const MIN_SAMPLES: u64 = 20;

/// The scenarios whose requests capacity mode measures.
const MEASURED: [&str; 2] = ["Load", "Infer"];

/// One model's share of a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelWindow {
    pub model: String,
    pub requests: u64,
    pub qps: f64,
    pub p99_us: u64,
    /// Its merged latencies (in memory only: the answer pools windows).
    #[serde(skip)]
    pub latency: LatencyHistogram,
}

/// What the group's workers measured between two checks, all models merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub start_ms: i64,
    pub end_ms: i64,
    /// Answered requests (the histogram's count).
    pub requests: u64,
    /// Requests sent and finished, answered or not (a spike's unanswered ones are the
    /// difference).
    #[serde(default)]
    pub sent: u64,
    pub failures: u64,
    pub qps: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub models: Vec<ModelWindow>,
    /// The window's merged latencies (kept in memory only: the spike phase merges its windows).
    #[serde(skip)]
    pub latency: LatencyHistogram,
}

/// How a judged window compares with the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Judgement {
    /// Right after a change: the window holds the transition and is not judged.
    Settling,
    /// Fewer than [`MIN_SAMPLES`] answered requests: not judged.
    TooFewSamples,
    /// p99 below the band: increase.
    Under,
    /// p99 within ±tolerance of the target: hold.
    OnTarget,
    /// p99 above the band: decrease.
    Over,
}

impl Judgement {
    /// Whether the window was judged against the target (and may be pooled into an answer).
    pub fn is_judged(self) -> bool {
        matches!(
            self,
            Judgement::Under | Judgement::OnTarget | Judgement::Over
        )
    }
}

/// Which part of the search a check belongs to (not to be confused with the capacity phases).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchStep {
    /// Doubling from min_concurrency until the first window over the target or with failures.
    SlowStart,
    /// Halving the bracket between the highest concurrency that met the target and the lowest
    /// that did not, until it is one `increase_step` wide.
    Bisect,
    /// Additive increase, multiplicative decrease around the knee (a trace written before slow
    /// start existed was all AIMD).
    #[default]
    Aimd,
}

impl SearchStep {
    pub fn as_str(self) -> &'static str {
        match self {
            SearchStep::SlowStart => "slow_start",
            SearchStep::Bisect => "bisect",
            SearchStep::Aimd => "aimd",
        }
    }
}

/// What the judged windows so far say about the knee: the highest concurrency that met the
/// target and the lowest that did not (over it, or with failures). A newer judgement that
/// contradicts one end (noise, or a server that changed) replaces it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Bracket {
    good: Option<u32>,
    bad: Option<u32>,
}

impl Bracket {
    fn met(&mut self, concurrency: u32) {
        self.good = Some(self.good.map_or(concurrency, |g| g.max(concurrency)));
        if self.bad.is_some_and(|b| b <= concurrency) {
            self.bad = None;
        }
    }

    fn missed(&mut self, concurrency: u32) {
        self.bad = Some(self.bad.map_or(concurrency, |b| b.min(concurrency)));
        if self.good.is_some_and(|g| g >= concurrency) {
            self.good = None;
        }
    }

    /// Both ends known and at most `step` apart: the knee is between them.
    fn narrow(&self, step: u32) -> bool {
        matches!((self.good, self.bad), (Some(g), Some(b)) if b.saturating_sub(g) <= step)
    }
}

/// Why a phase ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// `stable_checks` judged windows in a row on target, or (slow start) the bracket is one
    /// `increase_step` wide and its lower end met the target.
    Converged,
    /// `max_decreases` back-offs: the load oscillates around the capacity.
    Oscillating,
    /// Under the target at max_concurrency: the capacity is above what was tried.
    NotSaturated,
    /// Over the target at min_concurrency for `stable_checks` judged windows in a row: the
    /// target cannot be met.
    Unreachable,
    /// The run's duration ended first.
    OutOfTime,
    /// A spike: a window after it was back within the target without unanswered requests.
    Recovered,
    /// A spike: no such window within its recovery_timeout.
    NotRecovered,
}

impl Ending {
    /// As report.json spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Ending::Converged => "converged",
            Ending::Oscillating => "oscillating",
            Ending::NotSaturated => "not_saturated",
            Ending::Unreachable => "unreachable",
            Ending::OutOfTime => "out_of_time",
            Ending::Recovered => "recovered",
            Ending::NotRecovered => "not_recovered",
        }
    }
}

/// One check of the trace: the window measured at `concurrency` and what followed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub concurrency: u32,
    pub window: Window,
    pub judgement: Judgement,
    pub next_concurrency: u32,
    /// The part of the search this check was made in.
    #[serde(default)]
    pub search_step: SearchStep,
}

/// A phase's answer: the concurrency whose judged windows, pooled, met the target at the
/// highest QPS (see [`pool`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseResult {
    pub ending: Option<Ending>,
    /// The group's total concurrency of the answer (None: nothing met the target).
    pub concurrency: Option<u32>,
    /// How many judged windows at that concurrency were pooled into the answer.
    #[serde(default)]
    pub windows: u32,
    pub max_qps: f64,
    pub p99_ms: f64,
    pub safe_rate_qps: f64,
    pub window_start_ms: Option<i64>,
    pub window_end_ms: Option<i64>,
    /// Per model at the best window.
    pub models: Vec<ModelWindow>,
}

/// The AIMD controller of one group and phase.
#[derive(Debug, Clone, PartialEq)]
pub struct Controller {
    config: ControllerConfig,
    concurrency: u32,
    since_change: u32,
    decreases: u32,
    streak: u32,
    /// Judged windows in a row over the target at min_concurrency.
    over_at_min: u32,
    step: SearchStep,
    bracket: Bracket,
    pub checks: Vec<Check>,
    pub ending: Option<Ending>,
}

impl Controller {
    pub fn new(config: ControllerConfig) -> Self {
        Controller {
            concurrency: config.min,
            since_change: 0,
            decreases: 0,
            streak: 0,
            over_at_min: 0,
            step: if config.slow_start {
                SearchStep::SlowStart
            } else {
                SearchStep::Aimd
            },
            bracket: Bracket::default(),
            checks: Vec::new(),
            ending: None,
            config,
        }
    }

    pub fn target_p99_ms(&self) -> f64 {
        self.config.target_p99_us as f64 / 1000.0
    }

    /// The total concurrency in effect now.
    pub fn concurrency(&self) -> u32 {
        self.concurrency
    }

    pub fn ended(&self) -> bool {
        self.ending.is_some()
    }

    /// Where a p99 falls against the target's band.
    pub fn judge(&self, p99_us: u64) -> Judgement {
        let c = &self.config;
        let target = c.target_p99_us as f64;
        let p99 = p99_us as f64;
        if p99 > target * (1.0 + c.tolerance) {
            Judgement::Over
        } else if p99 < target * (1.0 - c.tolerance) {
            Judgement::Under
        } else {
            Judgement::OnTarget
        }
    }

    /// Feeds the window measured at [`Self::concurrency`]; returns the concurrency for the
    /// next window. After the phase ended it changes nothing.
    pub fn check(&mut self, window: Window) -> u32 {
        if self.ended() {
            return self.concurrency;
        }
        let before = self.concurrency;
        self.since_change += 1;
        let judgement = self.judge_window(&window);
        let meets = matches!(judgement, Judgement::Under | Judgement::OnTarget);
        if meets {
            self.over_at_min = 0;
        }
        let step = self.step;
        // Failures in a window that met the target are congestion too, as far as the search
        // goes (the answer still pools the window: fail-fast judges the failures).
        let congested = window.failures > 0 && meets;
        match judgement {
            Judgement::Under | Judgement::OnTarget if congested && step != SearchStep::Aimd => {
                self.streak = 0;
                self.bracket.missed(before);
                self.narrow_down(before);
            }
            Judgement::Under | Judgement::OnTarget if step != SearchStep::Aimd => {
                self.searching_met(judgement, before, step);
            }
            Judgement::Under => self.aimd_under(before),
            Judgement::OnTarget => {
                self.bracket.met(before);
                self.streak += 1;
                if self.streak >= self.config.stable_checks {
                    self.ending = Some(Ending::Converged);
                }
            }
            Judgement::Over => self.over(before, step),
            Judgement::Settling | Judgement::TooFewSamples => {}
        }
        self.checks.push(Check {
            concurrency: before,
            window,
            judgement,
            next_concurrency: self.concurrency,
            search_step: step,
        });
        self.converged_only_on_an_answer();
        if self.concurrency != before {
            self.since_change = 0;
        }
        self.concurrency
    }

    /// The search ends converged only where the answer ([`pool`]) exists. Windows judge the
    /// search one at a time, the answer pools them: a concurrency that met the target in its
    /// last window may miss it over all of them (one slow window at the floor is taken for
    /// noise). Then the bracket's lower end is judged again, in AIMD, until its windows agree
    /// or the phase's time is out.
    fn converged_only_on_an_answer(&mut self) {
        if self.ending != Some(Ending::Converged) || pool(&self.checks, self.limit_us()).is_some() {
            return;
        }
        self.ending = None;
        self.step = SearchStep::Aimd;
        self.streak = 0;
        self.concurrency = self
            .bracket
            .good
            .unwrap_or(self.config.min)
            .max(self.config.min);
        if let Some(last) = self.checks.last_mut() {
            last.next_concurrency = self.concurrency;
        }
    }

    /// The p99 the answer may reach: the target and its tolerance.
    fn limit_us(&self) -> f64 {
        self.config.target_p99_us as f64 * (1.0 + self.config.tolerance)
    }

    /// How `window` is judged: not at all while settling or on too few samples, else its p99.
    fn judge_window(&self, window: &Window) -> Judgement {
        // A phase's first window holds its start (workers starting, or the previous phase).
        if self.checks.is_empty() || self.since_change <= self.config.settle_periods {
            Judgement::Settling
        } else if window.requests < MIN_SAMPLES {
            Judgement::TooFewSamples
        } else {
            self.judge(window.p99_us)
        }
    }

    /// Slow start or bisection (`step`), after a window at `before` met the target without
    /// failures.
    fn searching_met(&mut self, judgement: Judgement, before: u32, step: SearchStep) {
        let c = self.config.clone();
        self.bracket.met(before);
        if judgement == Judgement::OnTarget {
            // On target: the knee is here. AIMD holds it until `stable_checks` windows
            // agree, rather than ending the search on one borderline window.
            self.step = SearchStep::Aimd;
            self.streak = 1;
            if self.streak >= c.stable_checks {
                self.ending = Some(Ending::Converged);
            }
        } else if step == SearchStep::SlowStart {
            if before >= c.max {
                self.ending = Some(Ending::NotSaturated);
            } else {
                let doubled = before.saturating_mul(2).max(before + 1);
                self.concurrency = doubled.min(c.max);
            }
        } else {
            self.narrow_down(before);
        }
    }

    /// AIMD, after a window at `before` came in under the target: one step up.
    fn aimd_under(&mut self, before: u32) {
        let c = self.config.clone();
        self.streak = 0;
        self.bracket.met(before);
        if c.slow_start && self.bracket.narrow(c.increase_step) {
            // The next step up is known to miss: this is the knee.
            self.ending = Some(Ending::Converged);
        } else if before >= c.max {
            self.ending = Some(Ending::NotSaturated);
        } else {
            self.concurrency = before.saturating_add(c.increase_step).min(c.max);
        }
    }

    /// A window at `before` came in over the target, in `step` of the search.
    fn over(&mut self, before: u32, step: SearchStep) {
        let c = self.config.clone();
        self.streak = 0;
        if before <= c.min {
            // One slow window at the floor may be noise; a run of them is the answer.
            self.over_at_min += 1;
            if self.over_at_min >= c.stable_checks {
                self.ending = Some(Ending::Unreachable);
            }
        } else if step != SearchStep::Aimd {
            self.bracket.missed(before);
            self.narrow_down(before);
        } else {
            self.bracket.missed(before);
            // Multiplicative, but always at least one step down, and no lower than a
            // concurrency below this one that met the target.
            let scaled = (f64::from(before) * c.decrease_rate).floor() as u32;
            // (slow_start: false is the plain AIMD of before.)
            let floor = match self.bracket.good {
                Some(good) if c.slow_start => good.max(c.min),
                _ => c.min,
            };
            self.concurrency = scaled.max(floor).min(before - 1).max(c.min);
            self.decreases += 1;
            if self.decreases >= c.max_decreases {
                self.ending = Some(Ending::Oscillating);
            }
        }
    }

    /// Slow start or bisection, after a judged window at `at` moved the bracket: the middle of
    /// the bracket next; once it is one `increase_step` wide, converged if its lower end met the
    /// target, else AIMD from min_concurrency.
    fn narrow_down(&mut self, at: u32) {
        let c = &self.config;
        let low = self.bracket.good.unwrap_or(c.min).max(c.min);
        let high = self.bracket.bad.unwrap_or(c.max.saturating_add(1));
        if high.saturating_sub(low) <= c.increase_step {
            if self.bracket.good.is_some() {
                self.ending = Some(Ending::Converged);
            } else {
                // Nothing met the target above the floor: AIMD judges the floor itself.
                self.step = SearchStep::Aimd;
                self.concurrency = low;
            }
            return;
        }
        self.step = SearchStep::Bisect;
        let middle = low + (high - low) / 2;
        // The bracket's ends were judged already; the middle is strictly between them.
        self.concurrency = middle.clamp(low + 1, high - 1);
        debug_assert_ne!(self.concurrency, at);
    }

    /// The run ended before the phase did.
    pub fn out_of_time(&mut self) {
        if self.ending.is_none() {
            self.ending = Some(Ending::OutOfTime);
        }
    }

    /// The span (start, end) of the edge window ([`edge`]): where the autoscaler reads the
    /// servers' signals.
    pub fn edge_span(&self) -> Option<(i64, i64)> {
        edge(&self.checks, self.limit_us()).map(|(_, _, w)| (w.start_ms, w.end_ms))
    }

    pub fn result(&self) -> PhaseResult {
        let safety = self.config.safety_factor;
        match pool(&self.checks, self.limit_us()) {
            Some((concurrency, windows, w)) => PhaseResult {
                ending: self.ending,
                concurrency: Some(concurrency),
                windows,
                max_qps: w.qps,
                p99_ms: w.p99_us as f64 / 1000.0,
                safe_rate_qps: w.qps * safety,
                window_start_ms: Some(w.start_ms),
                window_end_ms: Some(w.end_ms),
                models: w.models.clone(),
            },
            None => PhaseResult {
                ending: self.ending,
                concurrency: None,
                windows: 0,
                max_qps: 0.0,
                p99_ms: 0.0,
                safe_rate_qps: 0.0,
                window_start_ms: None,
                window_end_ms: None,
                models: Vec::new(),
            },
        }
    }
}

/// The answer of a controller's trace: its judged windows pooled per concurrency (histograms
/// merged, so the p99 is exact over all of them; QPS weighted by each window's length), and of
/// the concurrencies whose pooled p99 is within `limit_us`, the one with the highest QPS (on a
/// tie the lower: more in flight bought nothing). Returns it with the number of windows pooled;
/// the pooled window's span is that of its best single window (the autoscaler reads the
/// servers' signals there).
/// Pooling keeps one lucky window from being the answer: a concurrency that met the target once
/// and missed it twice is judged on all three.
pub fn pool(checks: &[Check], limit_us: f64) -> Option<(u32, u32, Window)> {
    let mut best: Option<(u32, u32, Window)> = None;
    for pooled in pooled_within(checks, limit_us) {
        if best.as_ref().is_none_or(|(_, _, b)| pooled.2.qps > b.qps) {
            best = Some(pooled);
        }
    }
    best
}

/// The highest concurrency whose pooled windows meet `limit_us` (pooled as in [`pool`]): the
/// edge of the operating region, where the autoscaler reads the servers' signals. Past a
/// tier's knee QPS is flat, so the highest-QPS concurrency is a coin toss among the plateau's
/// (on a server that saturates at the lowest load, the lowest, where no signal has grown yet);
/// the edge is not.
pub fn edge(checks: &[Check], limit_us: f64) -> Option<(u32, u32, Window)> {
    pooled_within(checks, limit_us).pop()
}

/// Per concurrency, ascending: its judged windows pooled, for those whose pooled p99 is within
/// `limit_us`, with the number of windows pooled. The pooled window's span is that of its best
/// window that met the target on its own (the first on a tie; else its last).
fn pooled_within(checks: &[Check], limit_us: f64) -> Vec<(u32, u32, Window)> {
    let mut by_concurrency: BTreeMap<u32, Vec<&Check>> = BTreeMap::new();
    for c in checks {
        if c.judgement.is_judged() {
            by_concurrency.entry(c.concurrency).or_default().push(c);
        }
    }
    let mut within = Vec::new();
    for (concurrency, checks) in by_concurrency {
        let windows: Vec<&Window> = checks.iter().map(|c| &c.window).collect();
        let mut pooled = merge_windows(&windows);
        if pooled.p99_us as f64 > limit_us {
            continue;
        }
        let mut at = *windows.last().expect("one per concurrency");
        let mut top = f64::NEG_INFINITY;
        for c in &checks {
            let meets = matches!(c.judgement, Judgement::Under | Judgement::OnTarget);
            if meets && c.window.qps > top {
                (at, top) = (&c.window, c.window.qps);
            }
        }
        (pooled.start_ms, pooled.end_ms) = (at.start_ms, at.end_ms);
        within.push((concurrency, windows.len() as u32, pooled));
    }
    within
}

/// Windows as one: counts summed, histograms merged, rates weighted by window length.
fn merge_windows(windows: &[&Window]) -> Window {
    let length = |w: &Window| (w.end_ms - w.start_ms).max(1) as f64;
    let total: f64 = windows.iter().map(|w| length(w)).sum();
    let mut latency = LatencyHistogram::new();
    let mut models: BTreeMap<String, (u64, f64, LatencyHistogram)> = BTreeMap::new();
    for w in windows {
        latency.merge(&w.latency);
        for m in &w.models {
            let e = models.entry(m.model.clone()).or_default();
            e.0 += m.requests;
            e.1 += m.qps * length(w) / total;
            e.2.merge(&m.latency);
        }
    }
    Window {
        start_ms: windows.iter().map(|w| w.start_ms).min().unwrap_or(0),
        end_ms: windows.iter().map(|w| w.end_ms).max().unwrap_or(0),
        requests: windows.iter().map(|w| w.requests).sum(),
        sent: windows.iter().map(|w| w.sent).sum(),
        failures: windows.iter().map(|w| w.failures).sum(),
        qps: windows.iter().map(|w| w.qps * length(w) / total).sum(),
        p50_us: latency.percentile_us(50.0),
        p99_us: latency.percentile_us(99.0),
        models: models
            .into_iter()
            .map(|(model, (requests, qps, latency))| ModelWindow {
                model,
                requests,
                qps,
                p99_us: latency.percentile_us(99.0),
                latency,
            })
            .collect(),
        latency,
    }
}

/// One (member, scenario, model)'s cumulative counts as last seen.
#[derive(Debug, Clone, Default)]
struct Seen {
    /// When the worker's snapshot with these counts was written.
    at_ms: i64,
    requests: u64,
    failures: u64,
    latency: LatencyHistogram,
}

/// Turns a group's cumulative counts into windows: remembers what each worker had reported at
/// the last window's end, and subtracts it (exact histograms: never averaged percentiles).
#[derive(Debug, Default)]
pub struct WindowMeter {
    seen: BTreeMap<(String, String, String), Seen>,
    start_ms: Option<i64>,
}

impl WindowMeter {
    /// The window from the last call (or from `start_ms` the first time) to `now_ms`, over the
    /// counts of `members` (others are ignored), each with the time of the worker snapshot that
    /// wrote it. QPS is each worker's own rate between its two snapshots, summed: the driver's
    /// check times and the workers' snapshots are up to a poll apart, and dividing one's counts
    /// by the other's clock would swing the rate by that much. A (worker, scenario, model) seen
    /// for the first time, or whose counts went backwards (the worker restarted), is only the
    /// baseline of the next window: when its counts began is not known.
    pub fn window(
        &mut self,
        counts: &[(String, i64, ModelCounts)],
        members: &[String],
        start_ms: i64,
        now_ms: i64,
    ) -> Window {
        let start = self.start_ms.unwrap_or(start_ms);
        let mut all = LatencyHistogram::new();
        let mut failures = 0;
        let mut qps = 0.0;
        // Per model: requests sent, answered latencies, answered per second.
        let mut models: BTreeMap<String, (u64, LatencyHistogram, f64)> = BTreeMap::new();
        for (member, at_ms, c) in counts {
            if !members.contains(member) || !MEASURED.contains(&c.scenario.as_str()) {
                continue;
            }
            let Ok(latency) = LatencyHistogram::decode(&c.latency_histogram) else {
                continue;
            };
            let key = (member.clone(), c.scenario.clone(), c.model.clone());
            let now = Seen {
                at_ms: *at_ms,
                requests: c.requests,
                failures: c.failures,
                latency: latency.clone(),
            };
            // A key seen for the first time (a worker's first report of it, or counts that went
            // back: the worker restarted) is only a baseline: its counts began at a time the
            // driver does not know, and dividing them by this window's length would overstate
            // the rate (by up to a poll interval's worth).
            let Some(before) = self.seen.insert(key, now) else {
                continue;
            };
            let Ok(window) = latency.since(&before.latency) else {
                continue;
            };
            if c.requests < before.requests {
                continue;
            }
            let seconds = (at_ms - before.at_ms) as f64 / 1000.0;
            let rate = if seconds > 0.0 {
                window.count() as f64 / seconds
            } else {
                0.0
            };
            failures += c.failures.saturating_sub(before.failures);
            let entry = models.entry(c.model.clone()).or_default();
            entry.0 += c.requests - before.requests;
            entry.1.merge(&window);
            entry.2 += rate;
            all.merge(&window);
            qps += rate;
        }
        self.start_ms = Some(now_ms);
        Window {
            start_ms: start,
            end_ms: now_ms,
            requests: all.count(),
            sent: models.values().map(|(sent, _, _)| sent).sum(),
            failures,
            qps,
            p50_us: all.percentile_us(50.0),
            p99_us: all.percentile_us(99.0),
            models: models
                .into_iter()
                // A model the window did not drive (another phase's) is not in it.
                .filter(|(_, (requests, h, _))| *requests > 0 || h.count() > 0)
                .map(|(model, (requests, h, qps))| ModelWindow {
                    model,
                    requests,
                    qps,
                    p99_us: h.percentile_us(99.0),
                    latency: h,
                })
                .collect(),
            latency: all,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn config() -> ControllerConfig {
        ControllerConfig {
            target_p99_us: 50_000,
            min: 1,
            max: 16,
            increase_step: 2,
            slow_start: false,
            decrease_rate: 0.5,
            settle_periods: 1,
            tolerance: 0.1,
            stable_checks: 2,
            max_decreases: 3,
            safety_factor: 0.7,
        }
    }

    /// A window of 100 requests at `qps` whose p99 is `p99_ms`.
    fn window(p99_ms: u64, qps: f64) -> Window {
        let mut latency = LatencyHistogram::new();
        for _ in 0..100 {
            latency.record(Duration::from_millis(p99_ms));
        }
        Window {
            start_ms: 0,
            end_ms: 1000,
            requests: 100,
            failures: 0,
            qps,
            p50_us: 1000,
            p99_us: p99_ms * 1000,
            models: vec![],
            sent: 100,
            latency,
        }
    }

    /// A check at `concurrency` judged `judgement`, its `window(p99_ms, qps)` spanning second
    /// `from_s` to second `to_s`.
    fn check(
        concurrency: u32,
        judgement: Judgement,
        p99_ms: u64,
        qps: f64,
        (from_s, to_s): (i64, i64),
    ) -> Check {
        let mut window = window(p99_ms, qps);
        (window.start_ms, window.end_ms) = (from_s * 1000, to_s * 1000);
        Check {
            concurrency,
            window,
            judgement,
            next_concurrency: concurrency,
            search_step: SearchStep::Aimd,
        }
    }

    /// A server that answers in 10 ms × ceil(concurrency / 4): four parallel slots.
    fn server(concurrency: u32) -> Window {
        let waves = u64::from(concurrency.div_ceil(4));
        window(10 * waves, f64::from(concurrency) / (0.010 * waves as f64))
    }

    #[test]
    fn increases_additively_after_settling_and_decreases_multiplicatively() {
        let mut c = Controller::new(config());
        assert_eq!(c.concurrency(), 1);
        // The first window after start is the transition.
        assert_eq!(c.check(window(5, 100.0)), 1);
        assert_eq!(c.checks[0].judgement, Judgement::Settling);
        assert_eq!(c.check(window(5, 100.0)), 3, "under: + increase_step");
        assert_eq!(c.check(window(5, 300.0)), 3, "settling after the change");
        assert_eq!(c.check(window(5, 300.0)), 5);
        c.check(window(80, 400.0));
        assert_eq!(c.check(window(80, 400.0)), 2, "over: 5 × 0.5, floored");
        let mut small = Controller::new(ControllerConfig {
            decrease_rate: 0.95,
            ..config()
        });
        small.concurrency = 3;
        assert_eq!(
            small.check(window(80, 1.0)),
            3,
            "a phase's first window settles"
        );
        assert_eq!(
            small.check(window(80, 1.0)),
            2,
            "always at least one step down"
        );
    }

    /// A server with `slots` parallel slots of 10 ms each: N in flight wait ceil(N / slots)
    /// waves.
    fn slotted(slots: u32, concurrency: u32) -> Window {
        let waves = u64::from(concurrency.div_ceil(slots));
        window(10 * waves, f64::from(concurrency) / (0.010 * waves as f64))
    }

    /// Runs a controller against `server` until it ends (at most 200 checks).
    fn search(config: ControllerConfig, server: impl Fn(u32) -> Window) -> Controller {
        let mut c = Controller::new(config);
        for _ in 0..200 {
            if c.ended() {
                break;
            }
            let w = server(c.concurrency());
            c.check(w);
        }
        c
    }

    /// The concurrencies of the checks that were not settling, in order.
    fn tried(c: &Controller) -> Vec<u32> {
        c.checks
            .iter()
            .filter(|k| k.judgement != Judgement::Settling)
            .map(|k| k.concurrency)
            .collect()
    }

    fn judged(c: &Controller) -> usize {
        c.checks
            .iter()
            .filter(|k| !matches!(k.judgement, Judgement::Settling | Judgement::TooFewSamples))
            .count()
    }

    fn slow_start(target_p99_ms: u64, max: u32) -> ControllerConfig {
        ControllerConfig {
            target_p99_us: target_p99_ms * 1000,
            max,
            increase_step: 1,
            slow_start: true,
            settle_periods: 1,
            ..config()
        }
    }

    #[test]
    fn slow_start_doubles_then_bisects_to_the_knee() {
        // 4 slots, target 15 ms: 4 in flight answer in 10 ms, 5 wait a second wave (20 ms).
        let c = search(slow_start(15, 64), |n| slotted(4, n));
        let trace: Vec<(u32, SearchStep, Judgement)> = c
            .checks
            .iter()
            .filter(|k| k.judgement != Judgement::Settling)
            .map(|k| (k.concurrency, k.search_step, k.judgement))
            .collect();
        use Judgement::*;
        use SearchStep::*;
        assert_eq!(
            trace,
            [
                (1, SlowStart, Under),
                (2, SlowStart, Under),
                (4, SlowStart, Under),
                (8, SlowStart, Over),
                (6, Bisect, Over),
                (5, Bisect, Over),
            ],
            "{:#?}",
            c.checks
        );
        let r = c.result();
        assert_eq!(r.ending, Some(Ending::Converged), "[4, 5] is one step wide");
        assert_eq!((r.concurrency, r.max_qps), (Some(4), 400.0));
        assert!(
            c.checks
                .iter()
                .all(|k| k.concurrency == k.next_concurrency || k.judgement != Settling),
            "every change waits for a settling window"
        );
    }

    /// Searches a server of `slots` parallel slots (target 15 ms: one wave meets it, two do
    /// not) with slow start up to `max`, and checks it converged on exactly `slots`.
    fn finds_the_knee(slots: u32, max: u32) -> Controller {
        let c = search(slow_start(15, max), |n| slotted(slots, n));
        let r = c.result();
        assert_eq!(
            r.ending,
            Some(Ending::Converged),
            "{slots}: {:#?}",
            c.checks
        );
        assert_eq!(r.concurrency, Some(slots), "{slots}");
        c
    }

    #[test]
    fn a_knee_above_one_hundred_converges_in_fourteen_judged_checks() {
        for slots in [101, 120, 127] {
            let c = finds_the_knee(slots, 512);
            assert!(judged(&c) <= 14, "{slots}: {} judged checks", judged(&c));
        }
        // Without slow start the same search climbs one at a time.
        let aimd = search(
            ControllerConfig {
                slow_start: false,
                ..slow_start(15, 512)
            },
            |n| slotted(120, n),
        );
        assert!(
            !aimd.ended() && judged(&aimd) >= 100,
            "{} judged checks and still climbing",
            judged(&aimd)
        );
    }

    #[test]
    fn every_knee_is_found_in_about_twice_its_logarithm() {
        for slots in 1..=300u32 {
            let c = finds_the_knee(slots, 1024);
            let log = 32 - slots.leading_zeros() as usize; // ceil-ish log2(slots + 1)
            assert!(
                judged(&c) <= 2 * log + 2,
                "{slots}: {} judged checks",
                judged(&c)
            );
        }
    }

    #[test]
    fn failures_end_the_doubling_like_a_window_over_the_target() {
        // Under the target everywhere, but from 8 in flight some requests fail.
        let c = search(slow_start(50, 64), |n| {
            let mut w = slotted(64, n);
            w.failures = u64::from(n >= 8);
            w
        });
        let r = c.result();
        assert_eq!(r.ending, Some(Ending::Converged), "{:#?}", c.checks);
        let tried = tried(&c);
        assert_eq!(tried, [1, 2, 4, 8, 6, 7]);
        assert_eq!(
            c.bracket,
            Bracket {
                good: Some(7),
                bad: Some(8)
            }
        );
    }

    #[test]
    fn slow_start_on_target_holds_and_stops_at_the_ends_of_the_range() {
        // 2 in flight are on target (20 ms ± 10%): AIMD holds there.
        let c = search(slow_start(20, 64), |n| slotted(1, n));
        assert_eq!(c.result().ending, Some(Ending::Converged));
        let last = c.checks.last().unwrap();
        assert_eq!(
            (last.concurrency, last.search_step),
            (2, SearchStep::Aimd),
            "{:#?}",
            c.checks
        );
        // Never over: doubling stops at max_concurrency, which is not saturated.
        let c = search(slow_start(500, 12), |n| slotted(64, n));
        let tried = tried(&c);
        assert_eq!(tried, [1, 2, 4, 8, 12]);
        assert_eq!(c.result().ending, Some(Ending::NotSaturated));
        // Over already at the floor: unreachable, as without slow start.
        let c = search(slow_start(5, 12), |n| slotted(1, n));
        assert_eq!(c.result().ending, Some(Ending::Unreachable));
    }

    #[test]
    fn a_borderline_window_is_judged_again_before_the_search_ends_on_it() {
        // Target 15 ms ± 10%. The bisection's window at 6 is on target (borderline): AIMD
        // measures 6 again instead of converging on one window, finds it over, and goes below.
        let mut c = Controller::new(ControllerConfig {
            settle_periods: 0,
            ..slow_start(15, 64)
        });
        // QPS grows with the concurrency: 25/s per request in flight.
        let at = |c: &Controller, p99_ms| window(p99_ms, 25.0 * f64::from(c.concurrency()));
        c.check(at(&c, 10)); // the phase's first window settles
        for (p99_ms, next) in [(10, 2), (10, 4), (10, 8), (30, 6), (15, 6), (30, 3)] {
            assert_eq!(c.check(at(&c, p99_ms)), next, "{:#?}", c.checks);
        }
        assert!(!c.ended());
        assert_eq!(c.checks.last().unwrap().search_step, SearchStep::Aimd);
        let r = c.result();
        assert_eq!(
            r.concurrency,
            Some(4),
            "6 pooled (15 ms and 30 ms) misses the target"
        );
        // A window clearly under the band at the bracket's lower end is trusted: converged.
        let mut c = Controller::new(ControllerConfig {
            settle_periods: 0,
            ..slow_start(15, 64)
        });
        for p99_ms in [10, 10, 10, 10, 30, 10, 30] {
            c.check(at(&c, p99_ms));
        }
        assert_eq!(c.ending, Some(Ending::Converged), "{:#?}", c.checks);
        assert_eq!(
            c.bracket,
            Bracket {
                good: Some(6),
                bad: Some(7)
            }
        );
    }

    /// A window of 100 requests at `qps`: `slow` of them took 200 ms, the rest 50 ms.
    fn with_slow(slow: usize, qps: f64) -> Window {
        let mut w = window(50, qps);
        w.latency = LatencyHistogram::new();
        for i in 0..100 {
            w.latency
                .record(Duration::from_millis(if i < slow { 200 } else { 50 }));
        }
        w.p99_us = w.latency.percentile_us(99.0);
        w
    }

    #[test]
    fn the_search_ends_converged_only_where_its_windows_pooled_meet_the_target() {
        // Target 125 ms. At the floor one slow window (3 of 100 requests at 200 ms) is taken for
        // noise, the next meets the target, 2 misses it: the bracket says converged at 1, but
        // 1's windows pooled (3 slow of 200) miss the target, so there is no answer yet.
        let mut c = Controller::new(ControllerConfig {
            settle_periods: 0,
            ..slow_start(125, 16)
        });
        c.check(with_slow(0, 20.0)); // the phase's first window settles
        for (slow, next) in [(3, 1), (0, 2), (100, 1)] {
            assert_eq!(c.check(with_slow(slow, 20.0)), next, "{:#?}", c.checks);
        }
        assert!(!c.ended(), "{:?}", c.ending);
        assert_eq!(c.result().concurrency, None);
        assert_eq!(c.checks.last().unwrap().next_concurrency, 1);
        // 1 judged again: 3 slow of 300, its pooled p99 meets the target and is the answer.
        c.check(with_slow(0, 20.0));
        assert_eq!(c.ending, Some(Ending::Converged), "{:#?}", c.checks);
        let r = c.result();
        assert_eq!((r.concurrency, r.windows), (Some(1), 3));
    }

    #[test]
    fn a_trace_written_before_slow_start_reads_as_aimd() {
        let mut json = serde_json::to_value(Check {
            concurrency: 3,
            window: window(5, 1.0),
            judgement: Judgement::Under,
            next_concurrency: 4,
            search_step: SearchStep::Bisect,
        })
        .unwrap();
        assert_eq!(json["search_step"], "bisect");
        json.as_object_mut().unwrap().remove("search_step");
        let old: Check = serde_json::from_value(json).unwrap();
        assert_eq!(old.search_step, SearchStep::Aimd);
    }

    #[test]
    fn windows_with_too_few_samples_are_not_judged() {
        let mut c = Controller::new(config());
        c.check(window(5, 1.0));
        let mut thin = window(500, 1.0);
        thin.requests = MIN_SAMPLES - 1;
        assert_eq!(c.check(thin), 1);
        assert_eq!(c.checks[1].judgement, Judgement::TooFewSamples);
    }

    #[test]
    fn converges_on_a_server_with_four_slots() {
        // Target 25 ms ± 10%: 8 in flight (two waves, 20 ms) is under, 12 (30 ms) is over.
        let mut c = Controller::new(ControllerConfig {
            target_p99_us: 25_000,
            increase_step: 1,
            decrease_rate: 0.8,
            settle_periods: 0,
            ..config()
        });
        for _ in 0..100 {
            if c.ended() {
                break;
            }
            let w = server(c.concurrency());
            c.check(w);
        }
        let r = c.result();
        assert_eq!(r.ending, Some(Ending::Oscillating), "{:#?}", c.checks);
        // 4 and 8 in flight both give 400/s (8 only waits longer): the first to reach it wins.
        assert_eq!(r.concurrency, Some(4), "the best window under the target");
        assert_eq!(r.max_qps, 400.0);
        assert!((r.p99_ms - 10.0).abs() < 0.05, "{}", r.p99_ms);
        assert!(
            c.checks
                .iter()
                .any(|k| k.concurrency == 9 && k.judgement == Judgement::Over),
            "it went past the capacity and came back"
        );
        assert!((r.safe_rate_qps - 280.0).abs() < 1e-9);
        assert!(c.checks.len() <= 30, "{} checks", c.checks.len());
    }

    #[test]
    fn on_target_for_stable_checks_converges() {
        let mut c = Controller::new(ControllerConfig {
            settle_periods: 0,
            ..config()
        });
        assert_eq!(
            c.check(window(500, 1.0)),
            1,
            "a phase's first window settles"
        );
        assert_eq!(c.check(window(48, 10.0)), 1);
        assert!(!c.ended());
        c.check(window(52, 11.0));
        assert_eq!(c.ending, Some(Ending::Converged));
        assert_eq!(
            c.result().max_qps,
            10.5,
            "on target counts as meeting it (both windows at 1, pooled)"
        );
        assert_eq!(
            c.check(window(500, 1.0)),
            1,
            "nothing changes after the end"
        );
        assert_eq!(c.checks.len(), 3);
    }

    #[test]
    fn the_ends_of_the_range() {
        let cfg = ControllerConfig {
            settle_periods: 0,
            max: 3,
            ..config()
        };
        let mut c = Controller::new(cfg.clone());
        c.check(window(5, 1.0));
        c.check(window(5, 2.0));
        assert_eq!(c.concurrency(), 3, "capped at max");
        c.check(window(5, 3.0));
        assert_eq!(c.ending, Some(Ending::NotSaturated));
        assert_eq!(c.result().concurrency, Some(3));

        let mut c = Controller::new(cfg);
        c.check(window(900, 1.0));
        assert!(!c.ended(), "the first window settles");
        c.check(window(900, 1.0));
        assert!(!c.ended(), "one slow window at the floor may be noise");
        c.check(window(900, 1.0));
        assert_eq!(
            c.ending,
            Some(Ending::Unreachable),
            "stable_checks (2) of them"
        );
        let r = c.result();
        assert_eq!(
            (r.concurrency, r.max_qps),
            (None, 0.0),
            "nothing met the target"
        );

        let mut c = Controller::new(config());
        c.out_of_time();
        assert_eq!(c.ending, Some(Ending::OutOfTime));
    }

    #[test]
    fn the_answer_pools_every_judged_window_at_a_concurrency() {
        use Judgement::*;
        let checks = [
            check(4, Settling, 900, 900.0, (0, 1)),
            check(4, Under, 100, 400.0, (0, 1)),
            check(4, OnTarget, 100, 420.0, (0, 2)),
            // One lucky window at 5, and two that missed the target.
            check(5, Under, 100, 500.0, (0, 1)),
            check(5, Over, 200, 480.0, (0, 1)),
            check(5, Over, 200, 490.0, (0, 1)),
        ];
        let (concurrency, windows, w) = pool(&checks, 110_000.0).unwrap();
        assert_eq!((concurrency, windows), (4, 2), "{w:?}");
        assert!(
            (w.qps - (400.0 + 2.0 * 420.0) / 3.0).abs() < 1e-9,
            "weighted by length"
        );
        assert_eq!((w.requests, w.sent), (200, 200));
        assert_eq!(
            (w.start_ms, w.end_ms),
            (0, 2000),
            "the span of its best window (420/s)"
        );
        assert!(
            w.p99_us.abs_diff(100_000) < 200,
            "settling windows are not pooled"
        );
        assert_eq!(pool(&checks, 50_000.0), None, "nothing within 50 ms");
        let mut c = Controller::new(ControllerConfig {
            target_p99_us: 100_000,
            ..config()
        });
        c.checks = checks.to_vec();
        let r = c.result();
        assert_eq!((r.concurrency, r.windows), (Some(4), 2));
    }

    #[test]
    fn the_edge_is_the_highest_concurrency_within_the_target_not_the_highest_qps() {
        use Judgement::*;
        // A server saturated at the lowest load: QPS flat (noise picks the top), p99 growing.
        let checks = [
            check(2, Under, 52, 39.5, (0, 1)),
            check(4, Under, 101, 39.2, (1, 2)),
            check(8, Over, 201, 39.8, (2, 3)),
            check(3, Under, 76, 39.4, (3, 4)),
            check(5, Over, 151, 39.3, (4, 5)),
            check(4, OnTarget, 102, 39.1, (5, 6)),
        ];
        let limit = 131_250.0;
        assert_eq!(pool(&checks, limit).unwrap().0, 2, "the noise's pick");
        let (concurrency, windows, w) = edge(&checks, limit).unwrap();
        assert_eq!((concurrency, windows), (4, 2));
        assert_eq!(
            (w.start_ms, w.end_ms),
            (1000, 2000),
            "its best window's span"
        );
        assert_eq!(edge(&checks, 50_000.0), None, "nothing within 50 ms");
        let mut c = Controller::new(ControllerConfig {
            target_p99_us: 125_000,
            tolerance: 0.05,
            ..config()
        });
        c.checks = checks.to_vec();
        assert_eq!(c.edge_span(), Some((1000, 2000)));
    }

    fn counts(model: &str, requests: u64, failures: u64, latencies_ms: &[u64]) -> ModelCounts {
        let mut h = LatencyHistogram::new();
        for l in latencies_ms {
            h.record(Duration::from_millis(*l));
        }
        ModelCounts {
            scenario: "Infer".into(),
            model: model.into(),
            tests: 1,
            failures,
            requests,
            latency_histogram: h.encode(),
            ..ModelCounts::default()
        }
    }

    #[test]
    fn windows_are_exact_differences_of_cumulative_counts() {
        let members = vec!["g-0".to_string(), "g-1".to_string()];
        let mut meter = WindowMeter::default();
        let at = |member: &str, at_ms: i64, c: ModelCounts| (member.to_string(), at_ms, c);
        let first = [
            at("g-0", 1000, counts("a", 2, 0, &[1, 1])),
            at("g-1", 500, counts("a", 1, 0, &[1])),
            at("other-0", 1000, counts("a", 50, 9, &[900; 50])),
        ];
        // First reports are baselines: when their counts began is not known (a worker that
        // reported 1 s after the window began may have counted since long before).
        let w = meter.window(&first, &members, 0, 1200);
        assert_eq!((w.requests, w.sent, w.qps), (0, 0, 0.0), "{w:?}");
        // g-0 adds two slow requests and one failure; g-1 restarted (its counts went back) and
        // reports a new model.
        let second = [
            at("g-0", 3000, counts("a", 4, 1, &[1, 1, 40, 40])),
            at("g-1", 2200, counts("b", 1, 0, &[2])),
        ];
        let w = meter.window(&second, &members, 0, 3100);
        assert_eq!((w.start_ms, w.end_ms), (1200, 3100));
        assert_eq!((w.requests, w.failures), (2, 1));
        assert_eq!(
            w.qps, 1.0,
            "2 in g-0's own 2 s; b's first report is a baseline"
        );
        assert!(
            w.p99_us >= 39_000,
            "the window holds only the new requests: {w:?}"
        );
        // Each worker's rate over its own snapshots: g-0 4 in 1 s, g-1 3 in 0.5 s.
        let third = [
            at("g-0", 4000, counts("a", 8, 1, &[1, 1, 40, 40, 5, 5, 5, 5])),
            at("g-1", 2700, counts("b", 4, 0, &[2, 3, 3, 3])),
        ];
        let w = meter.window(&third, &members, 0, 4100);
        assert_eq!(w.qps, 4.0 + 6.0);
        let names: Vec<_> = w
            .models
            .iter()
            .map(|m| (m.model.as_str(), m.requests, m.qps))
            .collect();
        assert_eq!(names, [("a", 4, 4.0), ("b", 3, 6.0)]);
        // No new snapshot since: nothing in this window; it all counts in the next.
        let again = meter.window(&third, &members, 0, 4500);
        assert_eq!((again.requests, again.qps), (0, 0.0));
        assert!(
            again.models.is_empty(),
            "models with nothing new are not in it: {again:?}"
        );
        let mut stress = counts("a", 10, 0, &[1]);
        stress.scenario = "SequenceValid".into();
        meter.window(&[at("g-0", 5000, stress.clone())], &members, 0, 5000);
        stress.requests = 20;
        let w = meter.window(&[at("g-0", 6000, stress)], &members, 0, 6000);
        assert_eq!(w.requests, 0, "only Load and Infer are measured");
    }
}
