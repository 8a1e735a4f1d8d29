//! junit.xml validates against the schema CI tools use (Jenkins xunit's junit-10.xsd, checked by
//! xmllint), and the check refuses what that schema does not allow: the `disabled` attribute
//! quick-junit writes on every suite, and a time with more than three decimals.

mod support;

use driver::judge::faults::FaultOutcome;
use driver::matrix::faults::FaultKind;
use driver::report::{FailedMember, Report};
use stress_common::report::RowJson;
use support::{assert_junit, junit_schema_check};

fn row(scenario: &str, tests: u64, failures: u64) -> RowJson {
    RowJson {
        scenario: scenario.into(),
        failures,
        tests,
        requests: tests * 10,
        skipped: 0,
        qps: 12.5,
        p50_us: 1000,
        p90_us: 2000,
        p99_us: 3000,
        max_us: 4000,
        description: "a scenario & its <description>".into(),
        send_lateness: None,
    }
}

fn report() -> Report {
    let mut r = Report::default();
    r.run_id = "junit-1".into();
    r.name = "junit".into();
    r.verdict = "FAIL".into();
    r.started_at_ms = 1_800_000_000_000;
    r.finished_at_ms = Some(1_800_000_061_234);
    r.failed_members = vec![FailedMember {
        member_id: "triton-0".into(),
        role: "SERVER".into(),
        group: "triton".into(),
        failed_at_ms: 1_800_000_030_000,
        reason: "killed by signal 9 (SIGKILL) before the end of the run".into(),
        diagnostics: Default::default(),
    }];
    r.groups.insert(
        "grpc".into(),
        vec![row("Load", 100, 0), row("SequenceValid", 20, 2)],
    );
    let fault = |name: &str, ok: bool, reached: bool, recovery_s: Option<f64>| FaultOutcome {
        name: name.into(),
        kind: FaultKind::Kill,
        target: "triton-0".into(),
        injected_at_ms: reached.then_some(1_800_000_020_000),
        ended_at_ms: None,
        ready_at_ms: None,
        first_error_ms: None,
        recovered_at_ms: None,
        recovery_s,
        recover_within_s: 30.0,
        lost_requests: 28,
        sequences_cut: 15,
        dropped_packets: None,
        clients: vec![],
        ok,
        reached,
        verdict: format!("{name} <verdict> & words"),
    };
    r.faults = vec![
        fault("kill-triton", true, true, Some(11.8)),
        fault("crash", false, true, Some(0.1234)),
        fault("later", false, false, None),
    ];
    r
}

#[test]
fn junit_xml_validates_against_junit_10_and_the_check_refuses_what_it_does_not_allow() {
    let xml = driver::render::junit::render(&report());
    let failed = assert_junit(&xml);
    assert_eq!(
        failed
            .iter()
            .map(|(suite, case, _)| (suite.as_str(), case.as_str()))
            .collect::<Vec<_>>(),
        [
            ("members", "triton-0"),
            ("grpc", "SequenceValid"),
            ("faults", "crash")
        ]
    );
    assert!(!xml.contains("disabled="), "{xml}");

    // What quick-junit writes by itself, and a time the schema's pattern refuses.
    let twin = xml.replacen("<testsuite ", "<testsuite disabled=\"0\" ", 1);
    let why = junit_schema_check(&twin).unwrap_err();
    assert!(why.contains("disabled"), "{why}");
    let twin = xml.replacen("time=\"61.234\"", "time=\"61.2345\"", 1);
    assert_ne!(
        twin, xml,
        "the report's time is written with three decimals: {xml}"
    );
    assert!(junit_schema_check(&twin).is_err());
}
