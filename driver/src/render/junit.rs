//! The report as JUnit XML (`junit.xml` beside report.json; `driver report --junit`), for CI
//! servers that show test results natively. Test suites:
//! - `members`: one test case per failed member (a server killed by a signal, a worker's exit),
//!   its reason as the failure — the root cause, first;
//! - one suite per client group: a test case per scenario, failed when any of its tests failed
//!   (the message counts them; the text lists the group's first recorded failures), except a
//!   scenario allowed to fail (PerfAnalyzer, as upstream);
//! - `models`: a test case per (scenario, model), all workers;
//! - `signatures`: a test case per failure signature, failed when it fails the run, skipped
//!   with its reason when a known issue (or its scenario, or an injected fault) excuses it.
//!
//! A scenario's or model's case fails only for failures that fail the run (a run with
//! signatures); a run recorded before them fails it for any failure, as then.
//! - `faults`: a test case per injected fault, failed when its clients did not recover within
//!   its `expect.recover_within` (the time is its recovery);
//! - `slo`: a test case per rule, failed when breached;
//! - `regressions`: a test case per finding against the baseline, failed with
//!   `regression.fail` (else passing, the change in its output), or one passing case when there
//!   are none; present when the run was compared.

use quick_junit::{NonSuccessKind, Report as JUnit, TestCase, TestCaseStatus, TestSuite};
use std::time::Duration;

use crate::report::Report;

/// How many recorded failures a failed test case lists in its text.
const LISTED: usize = 5;

fn failed(message: String, text: Option<String>) -> TestCaseStatus {
    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
    status.set_message(message);
    if let Some(t) = text {
        status.set_description(t);
    }
    status
}

fn case(name: &str, classname: &str, status: TestCaseStatus) -> TestCase {
    let mut c = TestCase::new(name, status);
    c.set_classname(classname);
    c
}

/// The JUnit document of a report.
pub fn render(report: &Report) -> String {
    let mut junit = JUnit::new(format!("triton-stress {}", report.run_id));
    if let Some(end) = report.finished_at_ms {
        junit.set_time(Duration::from_millis(
            u64::try_from(end - report.started_at_ms).unwrap_or(0),
        ));
    }
    junit.add_test_suite(members_suite(report));
    for suite in group_suites(report) {
        junit.add_test_suite(suite);
    }
    junit.add_test_suite(models_suite(report));
    let optional = [
        signatures_suite(report),
        faults_suite(report),
        slo_suite(report),
        regressions_suite(report),
    ];
    for suite in optional.into_iter().flatten() {
        junit.add_test_suite(suite);
    }
    let xml = junit
        .to_string()
        .expect("a JUnit report of plain strings serialises");
    without_disabled(&xml)
}

/// A case per failed member, its reason as the failure.
fn members_suite(report: &Report) -> TestSuite {
    let mut members = TestSuite::new("members");
    for m in &report.failed_members {
        members.add_test_case(case(
            &m.member_id,
            &format!("{}.{}", m.role, m.group),
            failed(m.reason.clone(), None),
        ));
    }
    members
}

/// The client group of a worker member.
fn group_of<'a>(report: &'a Report, member: &str) -> Option<&'a str> {
    report
        .workers
        .iter()
        .find(|w| w.member_id == member)
        .map(|w| w.group.as_str())
}

/// Whether failures of `scenario` (on `model`, by a member of `group`) fail the run.
fn failing(report: &Report, scenario: &str, model: Option<&str>, group: Option<&str>) -> bool {
    report.signatures.iter().any(|s| {
        s.fails.is_some()
            && s.scenario == scenario
            && model.is_none_or(|m| s.model == m)
            && group.is_none_or(|g| s.members.iter().any(|m| group_of(report, m) == Some(g)))
    })
}

/// A suite per client group: a case per scenario, its first recorded failures listed.
fn group_suites(report: &Report) -> Vec<TestSuite> {
    let judged = !report.signatures.is_empty();
    let mut suites = Vec::new();
    for (group, rows) in &report.groups {
        let mut suite = TestSuite::new(group.as_str());
        for r in rows.iter().filter(|r| r.scenario != "TOTAL") {
            // A scenario allowed to fail (upstream: PerfAnalyzer) does not fail the run.
            let allowed = stress_common::scenario::Scenario::parse(&r.scenario)
                .is_some_and(|s| s.allowed_to_fail());
            let fails = if judged {
                failing(report, &r.scenario, None, Some(group))
            } else {
                r.failures > 0 && !allowed
            };
            let status = if fails {
                let listed: Vec<String> = report
                    .failures
                    .iter()
                    .filter(|(member, f)| {
                        f.scenario == r.scenario && group_of(report, member) == Some(group.as_str())
                    })
                    .take(LISTED)
                    .map(|(member, f)| format!("{member}: {f}"))
                    .collect();
                failed(
                    format!(
                        "{} of {} tests failed ({} requests)",
                        r.failures, r.tests, r.requests
                    ),
                    (!listed.is_empty()).then(|| listed.join("\n")),
                )
            } else {
                TestCaseStatus::success()
            };
            suite.add_test_case(case(&r.scenario, group, status));
        }
        suites.push(suite);
    }
    suites
}

/// A case per (scenario, model), all workers.
fn models_suite(report: &Report) -> TestSuite {
    let judged = !report.signatures.is_empty();
    let mut models = TestSuite::new("models");
    for r in &report.models {
        let fails = if judged {
            failing(report, &r.scenario, Some(&r.model), None)
        } else {
            r.failures > 0
        };
        let status = if fails {
            failed(format!("{} of {} tests failed", r.failures, r.tests), None)
        } else {
            TestCaseStatus::success()
        };
        models.add_test_case(case(
            &format!("{}/{}", r.scenario, r.model),
            "models",
            status,
        ));
    }
    models
}

/// A case per failure signature (None: the run has none, recorded before them).
fn signatures_suite(report: &Report) -> Option<TestSuite> {
    if report.signatures.is_empty() {
        return None;
    }
    let mut suite = TestSuite::new("signatures");
    for s in &report.signatures {
        let name = format!(
            "{} {} {}",
            s.scenario,
            if s.model.is_empty() { "-" } else { &s.model },
            s.signature
        );
        let text = format!(
            "{} failure(s), {}; {}: {}\nexample ({}): {}",
            s.count, s.message, s.class, s.evidence, s.example_member, s.example
        );
        let status = match (&s.fails, &s.known_issue) {
            (Some(why), _) => failed(why.clone(), Some(text)),
            (None, known) => {
                let mut skipped = TestCaseStatus::skipped();
                let reason = match known
                    .as_ref()
                    .and_then(|id| report.known_issues.iter().find(|k| k.id == *id))
                {
                    Some(k) => format!("known issue {}: {}", k.id, k.reason),
                    None => format!("{}: does not fail the run", s.status.as_str()),
                };
                skipped.set_message(reason);
                skipped.set_description(text);
                skipped
            }
        };
        suite.add_test_case(case(&name, &format!("signatures.{}", s.class), status));
    }
    Some(suite)
}

/// A case per injected fault, its time the recovery (None: no fault was injected).
fn faults_suite(report: &Report) -> Option<TestSuite> {
    if report.faults.is_empty() {
        return None;
    }
    let mut faults = TestSuite::new("faults");
    for f in &report.faults {
        let status = if f.ok {
            TestCaseStatus::success()
        } else if !f.reached {
            let mut skipped = TestCaseStatus::skipped();
            skipped.set_message(f.verdict.clone());
            skipped
        } else {
            failed(f.verdict.clone(), None)
        };
        let mut c = case(&f.name, &format!("fault.{}", f.kind.as_str()), status);
        if let Some(took) = f.recovery_s {
            c.set_time(Duration::from_millis(
                (took.max(0.0) * 1000.0).round() as u64
            ));
        }
        c.set_system_out(format!(
            "{} of {}: {}; lost {} tests, {} sequences cut",
            f.kind.as_str(),
            f.target,
            f.verdict,
            f.lost_requests,
            f.sequences_cut
        ));
        faults.add_test_case(c);
    }
    Some(faults)
}

/// A case per SLO rule (None: the run has none).
fn slo_suite(report: &Report) -> Option<TestSuite> {
    if report.slo.is_empty() {
        return None;
    }
    let mut slo = TestSuite::new("slo");
    for o in &report.slo {
        let status = if o.ok {
            TestCaseStatus::success()
        } else {
            failed(o.line(), None)
        };
        slo.add_test_case(case(&o.rule, "slo", status));
    }
    Some(slo)
}

/// A case per finding against the baseline, or one passing case when there are none (None:
/// the run was not compared).
fn regressions_suite(report: &Report) -> Option<TestSuite> {
    let b = report
        .baseline
        .as_ref()
        .filter(|b| !b.baseline_run.is_empty())?;
    let mut suite = TestSuite::new("regressions");
    let class = format!("regressions.{}", b.baseline_run);
    if b.regressions.is_empty() {
        suite.add_test_case(case(
            &format!("{} metrics compared: {}", b.compared, b.tally()),
            &class,
            TestCaseStatus::success(),
        ));
    }
    for f in &b.regressions {
        // Findings fail only with `regression.fail`; otherwise they are reported passing,
        // with the change as their output.
        if b.fail {
            suite.add_test_case(case(&f.metric, &class, failed(f.describe(), None)));
        } else {
            let mut c = case(&f.metric, &class, TestCaseStatus::success());
            c.set_system_out(format!(
                "REGRESSION {} (regression.fail is off)",
                f.describe()
            ));
            suite.add_test_case(c);
        }
    }
    Some(suite)
}

/// The XML without the `disabled` attribute that quick-junit writes on every suite: Jenkins
/// xunit's junit-10.xsd, which CI tools validate against, does not allow it (and nothing here
/// is ever disabled).
fn without_disabled(xml: &str) -> String {
    use quick_xml::events::{BytesStart, Event};
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut writer = quick_xml::Writer::new(Vec::new());
    let strip = |e: &BytesStart| {
        let mut out = BytesStart::new(String::from_utf8_lossy(e.name().as_ref()).into_owned());
        for a in e.attributes().flatten() {
            if a.key.as_ref() != b"disabled" {
                out.push_attribute(a);
            }
        }
        out
    };
    loop {
        let event = match reader
            .read_event()
            .expect("quick-junit writes well-formed XML")
        {
            Event::Eof => break,
            Event::Start(e) => Event::Start(strip(&e)),
            Event::Empty(e) => Event::Empty(strip(&e)),
            other => other,
        };
        writer
            .write_event(event)
            .expect("writing to a Vec does not fail");
    }
    String::from_utf8(writer.into_inner()).expect("the input was UTF-8")
}
