//! Client/server reconciliation: did the servers see what the workers counted? Per model, the
//! successes the servers report (`nv_inference_request_success` deltas from the baseline
//! scrape before the workers started to the last one after their final flush, summed over
//! every server of the run) against the requests the workers saw answered OK.
//!
//! perf_analyzer's requests are counted one by one from its profile export, like the worker's.
//! A gap is explained only by requests whose outcome a worker could not see: ones it counted
//! as failed or timed out (the server may still have finished them), ones the crashing client
//! sent before it was killed, a failed perf_analyzer run's (it prints no count), and the runs
//! of perf_analyzer killed at a worker's stop (at most a run's request count each). A surplus of
//! OK answers is explained only by what a restarted server served after its last scrape (at
//! most its top sampled rate over that time). What remains is a finding, with the numbers.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use stress_common::histogram::{HistogramError, LatencyHistogram};
use stress_common::limits::PERF_ANALYZER_REQUESTS;
use stress_common::scenario::Scenario;
use stress_common::status::ModelCounts;
use stress_common::triton_metrics::ServerSample;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reconciliation {
    pub model: String,
    /// Successes over every server of the run during the load.
    pub server_success: u64,
    pub server_failure: u64,
    /// Requests the workers (and their perf_analyzer runs) saw answered OK.
    pub client_ok: u64,
    /// Requests the workers sent and saw fail (an error, a timeout, a cancellation).
    pub client_not_ok: u64,
    /// Requests sent by the crashing client: counted, outcome unseen.
    pub client_unseen: u64,
    /// perf_analyzer runs killed at a worker's stop: their requests (at most
    /// `PERF_ANALYZER_REQUESTS` each) counted nowhere.
    pub uncounted_runs: u64,
    /// At most this many successes a server served after its last scrape before it restarted
    /// (its top sampled rate of the model over the time it went unscraped): never scraped.
    #[serde(default)]
    pub server_unscraped: u64,
    /// server_success − client_ok.
    pub gap: i64,
    pub verdict: Verdict,
    /// Why, in words, with the numbers.
    pub explanation: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The servers' successes are the workers' OK answers, exactly.
    Reconciled,
    /// The gap is within the requests whose outcome the workers could not see.
    Explained,
    /// A gap no counted request explains: a finding.
    Mismatch,
    /// The samples do not cover the load (a server never sampled, the run ended before the
    /// last sample): nothing to compare.
    NotSampled,
}

/// What the run's servers and workers say, per model. `not_comparable`: why the samples do
/// not cover the load (a server never sampled, no final sample); `uncounted`: why the servers
/// may have served requests no worker could count (an external server that others may send
/// to; a worker killed before it reported its last requests), in words.
pub fn reconcile(
    worker_counts: &[ModelCounts],
    samples: &[(String, ServerSample)],
    not_comparable: Option<&str>,
    uncounted: Option<&str>,
) -> Result<Vec<Reconciliation>, HistogramError> {
    let mut per_model: BTreeMap<String, Sides> = BTreeMap::new();
    for (_, s) in samples {
        for m in &s.models {
            let e = per_model.entry(m.model.clone()).or_default();
            e.server_success += m.success;
            e.server_failure += m.failure;
        }
    }
    for (model, unscraped) in unscraped_successes(samples) {
        per_model.entry(model).or_default().unscraped = unscraped;
    }
    for c in worker_counts {
        let e = per_model.entry(c.model.clone()).or_default();
        let scenario = Scenario::parse(&c.scenario);
        e.perf_analyzer_failed |= scenario == Some(Scenario::PerfAnalyzer) && c.failures > 0;
        e.uncounted_runs += c.uncounted_runs;
        if scenario.is_some_and(Scenario::sent_by_a_child) {
            e.unseen += c.requests;
            continue;
        }
        if scenario.is_some_and(Scenario::answered_with_errors) {
            e.not_ok += c.requests;
            continue;
        }
        let ok = LatencyHistogram::decode(&c.latency_histogram)?.count();
        e.ok += ok;
        e.not_ok += c.requests.saturating_sub(ok);
    }
    Ok(per_model
        .into_iter()
        // A model nobody sent to and no server served is not worth a row.
        .filter(|(_, s)| {
            s.server_success + s.server_failure > 0.0 || s.ok + s.not_ok + s.unseen > 0
        })
        .map(|(model, s)| {
            let server_success = s.server_success.round() as u64;
            let gap = server_success as i64 - s.ok as i64;
            let (verdict, explanation) = judge(gap, &s, not_comparable, uncounted);
            Reconciliation {
                model,
                server_success,
                server_failure: s.server_failure.round() as u64,
                client_ok: s.ok,
                client_not_ok: s.not_ok,
                client_unseen: s.unseen,
                uncounted_runs: s.uncounted_runs,
                server_unscraped: s.unscraped.ceil() as u64,
                gap,
                verdict,
                explanation,
            }
        })
        .collect())
}

/// One model's two sides.
#[derive(Default)]
struct Sides {
    server_success: f64,
    server_failure: f64,
    /// Successes restarted servers may have served unscraped ([`unscraped_successes`]).
    unscraped: f64,
    ok: u64,
    not_ok: u64,
    unseen: u64,
    uncounted_runs: u64,
    perf_analyzer_failed: bool,
}

/// Per model, how many successes servers may have served after their last scrape before they
/// restarted: for each restart (a sample with `unscraped_ms`), the server's top sampled rate
/// of the model times the time it went unscraped. Its top rate, not its last: a bound, so the
/// surplus it explains is never more than the server could have served.
fn unscraped_successes(samples: &[(String, ServerSample)]) -> BTreeMap<String, f64> {
    let mut top: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    for (server, s) in samples {
        if s.interval_ms <= 0 || s.unscraped_ms.is_some() {
            continue;
        }
        for m in &s.models {
            let rate = m.success * 1000.0 / s.interval_ms as f64;
            let e = top.entry((server.as_str(), m.model.as_str())).or_default();
            *e = e.max(rate);
        }
    }
    let mut unscraped: BTreeMap<String, f64> = BTreeMap::new();
    for (server, s) in samples {
        let Some(ms) = s.unscraped_ms else { continue };
        for ((_, model), rate) in top.iter().filter(|((sv, _), _)| *sv == server.as_str()) {
            *unscraped.entry(model.to_string()).or_default() += rate * ms.max(0) as f64 / 1000.0;
        }
    }
    unscraped
}

/// The verdict on one model's gap (server successes − worker OKs).
fn judge(
    gap: i64,
    s: &Sides,
    not_comparable: Option<&str>,
    uncounted: Option<&str>,
) -> (Verdict, String) {
    if let Some(why) = not_comparable {
        return (Verdict::NotSampled, format!("not compared: {why}"));
    }
    let (not_ok, unseen, uncounted_runs) = (s.not_ok, s.unseen, s.uncounted_runs);
    let unseen_total = not_ok + unseen;
    let unscraped = s.unscraped.ceil() as u64;
    match gap {
        0 => (
            Verdict::Reconciled,
            "every server-side success is a worker's OK answer".into(),
        ),
        g if g < 0 && g.unsigned_abs() <= unscraped => (
            Verdict::Explained,
            format!(
                "the workers counted {} OK answers more than the servers reported successes: \
                 within the {unscraped} a restarted server may have served after its last \
                 scrape (its top sampled rate over the time it went unscraped)",
                -g
            ),
        ),
        g if g < 0 => (
            Verdict::Mismatch,
            format!(
                "the workers counted {} OK answers more than the servers reported successes \
                 (double counting, or a server restarted and lost its counters)",
                -g
            ),
        ),
        g if g as u64 <= unseen_total => (
            Verdict::Explained,
            format!(
                "{g} server-side successes the workers did not see answered: within the {not_ok} \
                 requests they saw fail or time out and the {unseen} the crashing client sent"
            ),
        ),
        g if uncounted_runs > 0
            && g as u64 <= unseen_total + uncounted_runs * PERF_ANALYZER_REQUESTS =>
        {
            (
                Verdict::Explained,
                format!(
                    "{g} server-side successes no worker counted: within the {unseen_total} \
                     requests whose outcome the workers could not see and the {uncounted_runs} \
                     perf_analyzer run(s) killed at a worker's stop (at most \
                     {PERF_ANALYZER_REQUESTS} requests each, counted nowhere)"
                ),
            )
        }
        g if s.perf_analyzer_failed => (
            Verdict::Explained,
            format!(
                "{g} server-side successes beyond the {unseen_total} requests whose outcome the \
                 workers could not see: perf_analyzer failed on this model, and the requests \
                 of a failed perf_analyzer run are not counted (it prints no count)"
            ),
        ),
        g if uncounted.is_some() => (
            Verdict::Explained,
            format!(
                "{g} server-side successes no worker counted: {}",
                uncounted.unwrap_or_default()
            ),
        ),
        g => (
            Verdict::Mismatch,
            format!(
                "{g} server-side successes no worker counted (beyond the {unseen_total} requests \
                 whose outcome the workers could not see): lost counts, or another client"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use stress_common::triton_metrics::ModelMetrics;

    fn counts(scenario: &str, model: &str, requests: u64, ok: u64) -> ModelCounts {
        let mut h = LatencyHistogram::new();
        for _ in 0..ok {
            h.record(Duration::from_millis(1));
        }
        ModelCounts {
            scenario: scenario.into(),
            model: model.into(),
            requests,
            latency_histogram: h.encode(),
            ..Default::default()
        }
    }

    fn served(server: &str, model: &str, success: f64) -> (String, ServerSample) {
        (
            server.into(),
            ServerSample {
                models: vec![ModelMetrics {
                    model: model.into(),
                    version: "1".into(),
                    success,
                    ..Default::default()
                }],
                ..Default::default()
            },
        )
    }

    fn one(r: Vec<Reconciliation>, model: &str) -> Reconciliation {
        r.into_iter().find(|r| r.model == model).unwrap()
    }

    /// Model m's reconciliation of `workers` against one server that counted `success`
    /// successes of it.
    fn reconciled_m(workers: &[ModelCounts], success: f64) -> Reconciliation {
        one(
            reconcile(workers, &[served("s", "m", success)], None, None).unwrap(),
            "m",
        )
    }

    #[test]
    fn successes_over_every_server_and_sample_match_the_workers_ok_answers() {
        let samples = [
            served("s-0", "m", 60.0),
            served("s-1", "m", 30.0),
            served("s-0", "m", 30.0),
        ];
        let workers = [
            counts("Load", "m", 70, 70),
            counts("Infer", "m", 30, 30),
            // Answered, timed, and an error by design: no success on the server.
            counts("SequenceNoStart", "m", 4, 4),
            // perf_analyzer's requests, from its profile export.
            counts("PerfAnalyzer", "m", 20, 20),
        ];
        let r = one(reconcile(&workers, &samples, None, None).unwrap(), "m");
        assert_eq!((r.server_success, r.client_ok, r.gap), (120, 120, 0));
        assert_eq!(r.verdict, Verdict::Reconciled);
    }

    #[test]
    fn a_surplus_within_what_a_restarted_server_served_unscraped_is_explained() {
        // s-0 served m at 100/s at most, then restarted 1.5 s after its last scrape: up to 150
        // successes its old process served were never scraped. s-1 never restarted.
        let sample = |server: &str, interval_ms: i64, success: f64, unscraped_ms| {
            let (server, mut s) = served(server, "m", success);
            (s.interval_ms, s.unscraped_ms) = (interval_ms, unscraped_ms);
            (server, s)
        };
        let samples = [
            sample("s-0", 1000, 100.0, None),
            sample("s-1", 1000, 400.0, None),
            sample("s-0", 1000, 50.0, None),
            sample("s-0", 3000, 30.0, Some(1500)),
        ];
        let workers = |ok| [counts("Load", "m", ok, ok)];
        let within = one(reconcile(&workers(730), &samples, None, None).unwrap(), "m");
        assert_eq!((within.gap, within.server_unscraped), (-150, 150));
        assert_eq!(within.verdict, Verdict::Explained, "{}", within.explanation);
        let beyond = one(reconcile(&workers(731), &samples, None, None).unwrap(), "m");
        assert_eq!(beyond.verdict, Verdict::Mismatch, "{}", beyond.explanation);
        // Without the restart the same surplus is a finding.
        let steady = [&samples[..3], &[sample("s-0", 3000, 30.0, None)]].concat();
        let none = one(reconcile(&workers(730), &steady, None, None).unwrap(), "m");
        assert_eq!(
            (none.server_unscraped, none.verdict),
            (0, Verdict::Mismatch)
        );
    }

    #[test]
    fn perf_analyzer_runs_killed_at_the_stop_explain_up_to_a_run_each() {
        let mut killed = counts("PerfAnalyzer", "m", 1000, 1000);
        killed.uncounted_runs = 2;
        let workers = [killed, counts("Load", "m", 100, 100)];
        let bound = 1100 + 2 * PERF_ANALYZER_REQUESTS;
        let within = reconciled_m(&workers, bound as f64);
        assert_eq!(within.uncounted_runs, 2);
        assert_eq!(within.verdict, Verdict::Explained, "{}", within.explanation);
        assert!(
            within.explanation.contains("2 perf_analyzer run(s) killed"),
            "{}",
            within.explanation
        );
        // One request beyond two runs' worth is a finding.
        let beyond = reconciled_m(&workers, (bound + 1) as f64);
        assert_eq!(beyond.verdict, Verdict::Mismatch, "{}", beyond.explanation);
        // Without a killed run the same gap is a finding too.
        let none = [
            counts("PerfAnalyzer", "m", 1000, 1000),
            counts("Load", "m", 100, 100),
        ];
        let unexplained = reconciled_m(&none, 1101.0);
        assert_eq!(unexplained.verdict, Verdict::Mismatch);
    }

    #[test]
    fn a_gap_within_unseen_outcomes_is_explained_and_beyond_them_is_a_finding() {
        // 5 timed out on the client, 3 sent by the crashing client: up to 8 unseen.
        let workers = [
            counts("Timeout", "m", 20, 15),
            counts("CrashingClient", "m", 3, 0),
            counts("Load", "m", 100, 100),
        ];
        let within = reconciled_m(&workers, 123.0);
        assert_eq!(
            (within.gap, within.client_not_ok, within.client_unseen),
            (8, 5, 3)
        );
        assert_eq!(within.verdict, Verdict::Explained, "{}", within.explanation);
        let beyond = reconciled_m(&workers, 124.0);
        assert_eq!(beyond.verdict, Verdict::Mismatch, "{}", beyond.explanation);
        assert!(
            beyond.explanation.contains("9 server-side"),
            "{}",
            beyond.explanation
        );
        let external = one(
            reconcile(
                &workers,
                &[served("s", "m", 124.0)],
                None,
                Some("an external server of the run may serve other clients"),
            )
            .unwrap(),
            "m",
        );
        assert_eq!(external.verdict, Verdict::Explained);
    }

    #[test]
    fn more_ok_answers_than_server_successes_is_always_a_finding() {
        let workers = [counts("Load", "m", 100, 100), counts("Timeout", "m", 50, 0)];
        let r = reconciled_m(&workers, 99.0);
        assert_eq!((r.gap, r.verdict), (-1, Verdict::Mismatch));
    }

    #[test]
    fn a_failed_perf_analyzer_explains_a_gap_and_an_unsampled_server_is_said() {
        let perf = |failures| ModelCounts {
            failures,
            ..counts("PerfAnalyzer", "m", 600, 600)
        };
        let served_more = [served("s", "m", 1000.0)];
        let r = one(
            reconcile(
                &[perf(0), counts("Load", "m", 10, 10)],
                &served_more,
                None,
                None,
            )
            .unwrap(),
            "m",
        );
        assert_eq!(
            r.verdict,
            Verdict::Mismatch,
            "its count is exact: {}",
            r.explanation
        );
        let workers = [perf(1), counts("Load", "m", 10, 10)];
        let r = one(reconcile(&workers, &served_more, None, None).unwrap(), "m");
        assert_eq!(r.verdict, Verdict::Explained, "{}", r.explanation);
        assert!(r.explanation.contains("perf_analyzer"));
        let r = one(
            reconcile(&workers, &[], Some("no metrics sample of s-1"), None).unwrap(),
            "m",
        );
        assert_eq!(r.verdict, Verdict::NotSampled);
        assert!(r.explanation.contains("s-1"));
        // A model no one sent to and no server served: no row.
        let idle = reconcile(&[counts("Load", "idle", 0, 0)], &[], None, None).unwrap();
        assert!(idle.is_empty());
    }
}
