//! Where a failure's fault lies, with the evidence that decided it (pure): the driver classifies
//! every failure record it judges — `server`, `client`, `infrastructure`, `harness` or
//! `injected` — from the record itself (its error, its steps on the wire) and what the run saw
//! around it (servers that ended, and how). In order:
//!
//! 1. inside a fault the run injected on purpose: `injected`;
//! 2. a sequence step rejected for having no START: if the test's own steps show START sent on
//!    that correlation id and answered OK, and the rejected step came within the model's
//!    `max_sequence_idle` of that answer, the server contradicted an answer it gave: `server`;
//!    a gap beyond it means the sequence really idled out (`client`: the client paused too
//!    long); no START in the steps means the client never sent one (`client`);
//! 3. a request that could not get through (transport, unavailable, timeout) while its server
//!    ended: `infrastructure` when the launcher says the pod was OOMKilled, evicted or its node
//!    lost, else `server` (it died);
//! 4. an answer saying the model's Python backend stub died (`Stub process '…' is not
//!    healthy`): `server`, naming the instance;
//! 5. otherwise by the error: a broken connection to a server that stayed up is the network
//!    (`infrastructure`); a wrong answer, the server's own error, a protocol violation, a
//!    refusal to serve or a late answer are the `server`'s; a request refused as invalid is the
//!    `client`'s; a test that could not run is the `harness`'s.

use stress_common::signature::{ErrorKind, FailureClass};
use stress_common::status::{DRIVER_MEMBER, DriverFailure, FailureRecord, WireStep};

/// Triton's default `max_sequence_idle_microseconds` (1 s), when the model's is not known.
const DEFAULT_SEQUENCE_IDLE_US: u64 = 1_000_000;

/// The text of a sequence step rejected for missing its START (tritonserver's words).
const NO_START: &str = "must specify the START flag";

/// A server that ended during the run: which addresses were its, when, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerEnd {
    pub member: String,
    /// Its addresses as clients reach them (`host:port`).
    pub addresses: Vec<String>,
    pub at_ms: i64,
    /// The launcher's words (`killed by signal 9`, `OOMKilled`).
    pub reason: String,
}

impl ServerEnd {
    /// Whether what ended it is the platform's, not the server's.
    fn by_infrastructure(&self) -> bool {
        ended_by_platform(&self.reason)
    }
}

/// Whether a launcher's words say the platform ended a member (its pod's memory limit, an
/// eviction, a lost node, a preemption), not the member itself.
fn ended_by_platform(reason: &str) -> bool {
    let r = reason.to_ascii_lowercase();
    [
        "oomkilled",
        "evicted",
        "node lost",
        "nodelost",
        "preempt",
        "deadlineexceeded",
    ]
    .iter()
    .any(|w| r.contains(w))
}

/// The class of a failed member's own failure when no failure signature explains it (an exit,
/// a stale heartbeat, a liveness probe, a pre-flight refusal), from its role and the driver's
/// words for it. None for a member that is a verdict rather than a process (`slo`).
pub fn member_failure(member_id: &str, role: &str, reason: &str) -> Option<Evidence> {
    if ended_by_platform(reason) {
        return Some(evidence(
            FailureClass::Infrastructure,
            "the platform ended it (its memory limit, an eviction or a lost node), not its own fault",
        ));
    }
    if member_id == DRIVER_MEMBER {
        return Some(driver_failure(DriverFailure::of(reason)));
    }
    let r = reason.to_ascii_lowercase();
    if let Some(why) = (role == "CLIENT").then(|| setup_refusal(&r)).flatten() {
        return Some(evidence(FailureClass::Setup, why));
    }
    let why = match role {
        "SERVER" if r.contains("unanswered") && r.contains("liveness probe answered") => {
            "the server took the worker's calls and ended none of them while its liveness probe \
             answered: its inference path hangs (a stuck backend, a deadlock, a process stuck \
             in its own crash handler)"
        }
        "SERVER" if r.contains("unanswered") => {
            "the server took the worker's calls and ended none of them"
        }
        "SERVER" if r.contains("liveness probe") => {
            "the server stopped answering its liveness probes while the run used it"
        }
        "SERVER" if r.contains("was not ready after") => {
            "the server did not become ready within run.server_ready_timeout, before any load: \
             a model still loading (named above, when its log says so: a longer timeout, if \
             it loads that slowly) or a start-up that hung"
        }
        "SERVER" if r.contains("exited before it was ready") => {
            "the server ended while it started, before any load: its log above says why (a \
             model that failed to load, an argument it refused)"
        }
        "SERVER" => {
            "the server ended or stopped answering during the load, and the platform reported \
             no memory limit, eviction or lost node: a failure of the server's own"
        }
        // The worker's words for a foreign client program it supervises (worker/src/foreign.rs).
        "CLIENT" if r.contains("client program") => {
            "the client program failed on its own (its exit, a line outside the client \
             interface, or silence): the client's failure, in its words above"
        }
        "CLIENT" if r.contains("panicked") => "a worker of ours panicked",
        "CLIENT" if r.contains("do not reach the store") || r.contains("store unavailable") => {
            "a worker of ours lost the store: it works, but its reports do not arrive"
        }
        "CLIENT" if r.contains("hung") => "a worker of ours hung (its process is stopped or idle)",
        "CLIENT" if r.contains("no heartbeat within") => "a worker of ours never reported",
        "CLIENT" if r.contains("qps 0") => {
            "a worker of ours completed no call, none waited on a server for the window, and \
             its servers answered their probes"
        }
        "CLIENT" if r.contains("unanswered") => {
            "a server held the worker's calls and ended none of them (the driver could not \
             name it from the address the worker used)"
        }
        "CLIENT" if r.contains("killed by signal") => {
            "a worker of ours was killed from outside the run (the launcher reported no memory \
             limit or eviction: an operator, or the kernel's OOM killer on a machine without one)"
        }
        "CLIENT" => "a worker of ours ended before the end of the run without a failed test",
        _ => return None,
    };
    let class = if role == "SERVER" || r.contains("unanswered") {
        FailureClass::Server
    } else if r.contains("client program") {
        FailureClass::Client
    } else {
        FailureClass::Harness
    };
    Some(evidence(class, why))
}

/// The driver's own failure, by the kind its event recorded.
fn driver_failure(kind: DriverFailure) -> Evidence {
    let (class, why) = match kind {
        DriverFailure::Died => (
            FailureClass::Harness,
            "the run's driver died: it stopped renewing its lease, and what it launched went with it",
        ),
        DriverFailure::Refused => (
            FailureClass::Setup,
            "the driver's pre-flight check refused to start the load: the matrix asks for what \
             its servers do not serve ready (nothing was tested)",
        ),
        DriverFailure::Interrupted => (
            FailureClass::Harness,
            "the driver was interrupted (SIGTERM/SIGINT): the run was stopped from outside, by \
             an operator or the platform",
        ),
        DriverFailure::SetUp => (
            FailureClass::Harness,
            "the driver could not set the run up (its launcher's words above)",
        ),
    };
    evidence(class, why)
}

/// Why a worker refused to test, when its words (`reason`, lower case) say it did: the matrix
/// and what it runs on do not fit. worker/src/main.rs, run.rs (follow_load_target) and the
/// Infer scenario's preparation write these.
fn setup_refusal(reason: &str) -> Option<&'static str> {
    Some(if reason.contains("pre-flight") {
        "the worker's pre-flight check refused to test: the matrix and the server's models do \
         not fit (the test never ran)"
    } else if reason.contains("bad input:") {
        "the worker refused its arguments: the matrix asks what the worker or its machine \
         cannot do (the test never ran)"
    } else if reason.contains("model mix cannot be run") {
        "the worker could not run the model mix a capacity phase set (the phase was not \
         measured)"
    } else {
        return None;
    })
}

/// What the run saw around its failures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Context {
    pub server_ends: Vec<ServerEnd>,
    /// Faults the run injected on purpose.
    pub injected: Vec<InjectedWindow>,
}

/// The time a fault the run injected owns the failures of its server's clients: from the
/// injection to its recovery (while the run goes: to the end of the recovery it is allowed).
#[derive(Debug, Clone, PartialEq)]
pub struct InjectedWindow {
    pub name: String,
    /// The faulted server's addresses (a failure record's `server` is one of them).
    pub addresses: Vec<String>,
    pub from_ms: i64,
    pub to_ms: i64,
    /// When the server was back: READY again after a kill or restart, the end of a pause or
    /// network fault (i64::MAX: not yet, or not known).
    pub back_ms: i64,
}

impl InjectedWindow {
    /// Whether `record` (its client saw `kind`) is the fault's: a failure on its server after
    /// the injection, of a test that began before the recovery (a sequence begun before a
    /// restart fails after it) — except a wrong answer to a test begun once the server was
    /// back: a fault cuts tests short, it does not make a served answer wrong, so that one is
    /// the server's even before every client has recovered.
    pub fn owns(&self, record: &FailureRecord, kind: ErrorKind) -> bool {
        let began = record
            .forensics
            .as_ref()
            .and_then(|f| f.test_started_ms)
            .unwrap_or(record.at_ms);
        if kind == ErrorKind::WrongAnswer && began >= self.back_ms {
            return false;
        }
        self.addresses.contains(&record.server)
            && record.at_ms >= self.from_ms
            && began <= self.to_ms
    }
}

/// A time of day (UTC) to the millisecond, as evidence shows it.
fn clock(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|_| format!("{ms} ms"))
}

/// A class and the evidence that decided it, in words.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Evidence {
    pub class: FailureClass,
    pub why: String,
}

fn evidence(class: FailureClass, why: impl Into<String>) -> Evidence {
    Evidence {
        class,
        why: why.into(),
    }
}

/// The class of `record`, whose client saw `kind`, in `context`.
pub fn classify(record: &FailureRecord, kind: ErrorKind, context: &Context) -> Evidence {
    if let Some(w) = context.injected.iter().find(|w| w.owns(record, kind)) {
        return evidence(
            FailureClass::Injected,
            format!(
                "the injected fault {} on {}: its test began before the clients recovered \
                 ({} to {})",
                w.name,
                record.server,
                clock(w.from_ms),
                if w.to_ms == i64::MAX {
                    "their recovery".to_string()
                } else {
                    clock(w.to_ms)
                }
            ),
        );
    }
    if record.actual.contains(NO_START)
        && let Some(e) = missing_start(record)
    {
        return e;
    }
    let ended = context
        .server_ends
        .iter()
        .find(|e| e.addresses.contains(&record.server) && e.at_ms <= record.at_ms + 2_000);
    if matches!(
        kind,
        ErrorKind::Transport | ErrorKind::Unavailable | ErrorKind::Timeout
    ) && let Some(end) = ended
    {
        let class = if end.by_infrastructure() {
            FailureClass::Infrastructure
        } else {
            FailureClass::Server
        };
        return evidence(
            class,
            format!(
                "its server {} ended ({}) at {} ms, {} ms from this failure",
                end.member,
                end.reason,
                end.at_ms,
                record.at_ms - end.at_ms
            ),
        );
    }
    if let Some(instance) = dead_backend_stub(&record.actual) {
        return evidence(
            FailureClass::Server,
            format!(
                "the model's Python backend stub process {instance} died: Triton answers \
                 every request to that instance \"not healthy\" from then on (tritonserver \
                 2.51 logs nothing of it at the default verbosity)"
            ),
        );
    }
    match kind {
        ErrorKind::Transport => evidence(
            FailureClass::Infrastructure,
            "the connection failed while its server stayed up: the network between them",
        ),
        ErrorKind::WrongAnswer => evidence(
            FailureClass::Server,
            "the server answered, and the answer failed its check",
        ),
        ErrorKind::ServerError => evidence(
            FailureClass::Server,
            "the server answered with an error of its own",
        ),
        ErrorKind::Protocol => evidence(
            FailureClass::Server,
            "the server's answer did not follow the protocol",
        ),
        ErrorKind::Unavailable => {
            evidence(FailureClass::Server, "the server said it cannot serve now")
        }
        ErrorKind::Timeout => evidence(
            FailureClass::Server,
            "the server did not answer within the client's deadline",
        ),
        ErrorKind::Rejected => evidence(
            FailureClass::Client,
            "the server refused the request as invalid",
        ),
        ErrorKind::Harness => evidence(
            FailureClass::Harness,
            "the test could not run for a reason of the worker's own",
        ),
    }
}

/// The instance whose Python backend stub died, from Triton's answer (`Stub process
/// 'NAME_0_0' is not healthy.`); Triton 2.51 logs nothing of it at the default verbosity, so
/// the answer is the evidence.
fn dead_backend_stub(actual: &str) -> Option<&str> {
    let rest = &actual[actual.find("Stub process '")? + "Stub process '".len()..];
    let (instance, after) = rest.split_once('\'')?;
    after
        .trim_start()
        .starts_with("is not healthy")
        .then_some(instance)
}

/// A step rejected for having no START, judged on the test's own steps (None: no steps to judge
/// by).
fn missing_start(record: &FailureRecord) -> Option<Evidence> {
    let forensics = record.forensics.as_ref()?;
    let steps = &forensics.steps;
    let rejected_at = steps.iter().rposition(|s| s.outcome.contains(NO_START))?;
    let rejected = &steps[rejected_at];
    let id = rejected.correlation_id.or(record.correlation_id);
    let same = |s: &&WireStep| s.correlation_id == id && s.model == rejected.model;
    let started = steps[..rejected_at]
        .iter()
        .enumerate()
        .filter(|(_, s)| same(s))
        .rfind(|(_, s)| s.flags.split('|').any(|f| f == "START"));
    let id_text = id.map_or_else(|| "?".to_string(), |i| i.to_string());
    let Some((start_at, start)) = started else {
        return Some(evidence(
            FailureClass::Client,
            format!(
                "no step of this test sent START on correlation id {id_text} before step {} \
                 was rejected for it: the client began the sequence without it",
                rejected_at + 1
            ),
        ));
    };
    if start.outcome != "ok" {
        return None;
    }
    // Every step of the sequence between START and the rejected one was answered.
    let answered_between = steps[start_at + 1..rejected_at]
        .iter()
        .filter(|s| same(s))
        .all(|s| s.outcome == "ok");
    if !answered_between {
        return None;
    }
    let last_answer_us = steps[start_at..rejected_at]
        .iter()
        .filter(|s| same(s))
        .map(|s| s.received_us)
        .max()
        .unwrap_or(start.received_us);
    let gap_us = (rejected.sent_us - last_answer_us).max(0) as u64;
    let (idle_us, whose) = match forensics.sequence_idle_us {
        Some(us) => (us, "the model's max_sequence_idle"),
        None => (
            DEFAULT_SEQUENCE_IDLE_US,
            "Triton's default max_sequence_idle (the model's is not known)",
        ),
    };
    let ms = |us: u64| us as f64 / 1000.0;
    let start_wait = (start.received_us - start.sent_us).max(0) as u64;
    if gap_us < idle_us {
        Some(evidence(
            FailureClass::Server,
            format!(
                "the server contradicted itself: step {} (START) of correlation id {id_text} was \
                 answered OK after {:.1} ms, and step {} was rejected {:.1} ms after the last \
                 answer for having no START, within {whose} ({:.0} ms), so the sequence cannot \
                 have idled out",
                start_at + 1,
                ms(start_wait),
                rejected_at + 1,
                ms(gap_us),
                ms(idle_us)
            ),
        ))
    } else {
        Some(evidence(
            FailureClass::Client,
            format!(
                "the client paused {:.1} ms on correlation id {id_text} before step {}, beyond \
                 {whose} ({:.0} ms): the server ended the idle sequence as configured",
                ms(gap_us),
                rejected_at + 1,
                ms(idle_us)
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::fixtures::{self, step};

    /// A server that never became ready failed before any load, and is said so; one that
    /// ended later is said to have ended during the load.
    #[test]
    fn a_server_that_never_got_ready_is_said_to_have_failed_before_the_load() {
        let why = |reason: &str| member_failure("triton-0", "SERVER", reason).unwrap().why;
        let slow = why(
            "tritonserver on 127.0.0.1:1 was not ready after 15s (models still loading: \
             slow:1); log: ...",
        );
        assert!(
            slow.contains("did not become ready within run.server_ready_timeout"),
            "{slow}"
        );
        let died = why("tritonserver on 127.0.0.1:1 exited before it was ready (exit status: 1)");
        assert!(
            died.contains("ended while it started, before any load"),
            "{died}"
        );
        let killed = why("killed by signal 9 (SIGKILL) before the end of the run");
        assert!(killed.contains("during the load"), "{killed}");
    }

    #[test]
    fn a_member_without_a_signature_is_classed_by_what_ended_it() {
        let class = |member: &str, role: &str, reason: &str| {
            member_failure(member, role, reason).map(|e| e.class)
        };
        use FailureClass::*;
        for (member, role, reason, expected) in [
            (
                "triton-0",
                "SERVER",
                "OOMKilled before the end of the run",
                Infrastructure,
            ),
            (
                "clients-0",
                "CLIENT",
                "Evicted before the end of the run",
                Infrastructure,
            ),
            (
                "triton-0",
                "SERVER",
                "pod r-triton-0 was evicted or deleted by the cluster, not by the driver: \
                 EvictionByEvictionAPI (Eviction API: evicting)",
                Infrastructure,
            ),
            (
                "triton-0",
                "SERVER",
                "killed by signal 9 (SIGKILL) before the end of the run",
                Server,
            ),
            (
                "ext-0",
                "SERVER",
                "external server failed 3 liveness probes in a row: refused",
                Server,
            ),
            (
                "driver",
                "DRIVER",
                "ABANDONED: driver gone (it stopped renewing its lease at about this time)",
                Harness,
            ),
            (
                "driver",
                "DRIVER",
                "pre-flight refused the load: client group g needs model add_sub@2, but server \
                 triton-0 does not have that version in its repository",
                Setup,
            ),
        ] {
            assert_eq!(class(member, role, reason), Some(expected), "{reason}");
        }
        // Calls held unanswered are the server's, with the probe's word on the process; a
        // worker that completed nothing with nothing waiting is ours.
        let hung = member_failure(
            "triton-0",
            "SERVER",
            "clients-0 reported: 16 calls to 127.0.0.1:8001 unanswered: none of its calls ended for 9.5 s while its liveness probe answered: its inference hangs",
        )
        .unwrap();
        assert_eq!(hung.class, Server);
        assert!(hung.why.contains("inference path hangs"), "{}", hung.why);
        let unnamed = member_failure(
            "clients-0",
            "CLIENT",
            "2 calls to 10.0.0.9:8001 unanswered: none of its calls ended for 3.0 s",
        )
        .unwrap();
        assert_eq!(unnamed.class, Server, "{}", unnamed.why);
        let idle = member_failure("clients-0", "CLIENT", "QPS 0 for 3 consecutive polls").unwrap();
        assert_eq!(idle.class, Harness);
        assert!(idle.why.contains("none waited on a server"), "{}", idle.why);
        let why = |reason: &str| member_failure("clients-0", "CLIENT", reason).unwrap();
        assert_eq!(
            why("stress stream panicked: oops").why,
            "a worker of ours panicked"
        );
        assert!(why("no heartbeat for 10s; its process runs and works (40 ms of CPU in 0.5 s): its reports do not reach the store, which the driver reads").why.contains("lost the store"));
        assert!(why("no heartbeat for 10s; its process runs but is idle (0 ms of CPU in 0.5 s): the worker is hung").why.contains("hung"));
        // The matrix and what it runs on do not fit: the setup's class, not the harness's.
        for (reason, words) in [
            (
                "final: pre-flight: model m input I has a dynamic dimension [-1]",
                "pre-flight",
            ),
            (
                "final: bad input: --scenarios lists PerfAnalyzer, and no perf_analyzer binary is on PATH",
                "refused its arguments",
            ),
            (
                "final: the driver's model mix cannot be run: mix a@2:1: model a@2 is not planned",
                "capacity phase",
            ),
        ] {
            let e = why(reason);
            assert_eq!(e.class, Setup, "{reason}");
            assert!(e.why.contains(words), "{reason}: {}", e.why);
        }
        // The driver's failures, by the kind its event recorded: it died only where its
        // lease ran out.
        let driver = |kind: DriverFailure, words: &str| {
            member_failure(DRIVER_MEMBER, "DRIVER", &kind.details(words)).unwrap()
        };
        let died = driver(DriverFailure::Died, "the driver's lease ran out");
        assert!(died.why.contains("died"), "{}", died.why);
        let refused = driver(DriverFailure::Refused, "client group g needs model m");
        assert_eq!(refused.class, Setup);
        assert!(refused.why.contains("pre-flight"), "{}", refused.why);
        let interrupted = driver(DriverFailure::Interrupted, "SIGTERM/SIGINT");
        assert!(
            interrupted.why.contains("from outside"),
            "{}",
            interrupted.why
        );
        for words in [
            "applying the owner ConfigMap: forbidden",
            "lease stopped renewing",
        ] {
            let setup = driver(DriverFailure::SetUp, words);
            assert_eq!(setup.class, Harness);
            assert!(
                setup.why.contains("could not set the run up"),
                "{}",
                setup.why
            );
        }
        let server = member_failure("triton-0", "SERVER", "bad input: x").unwrap();
        assert_eq!(
            server.class, Server,
            "only a worker's words are the setup's"
        );
        assert!(
            why("killed by signal 9 (SIGKILL) before the end of the run")
                .why
                .contains("from outside")
        );
        assert_eq!(
            why("exited with code 3 before the end of the run").class,
            Harness
        );
        assert_eq!(member_failure("slo", "?", "p99 over 5 ms"), None);
        // A foreign client program that failed is the client's failure, not the harness's.
        let foreign = why("final: client program exited: exit status: 3; its stderr ended:\nx");
        assert_eq!(foreign.class, Client, "{}", foreign.why);
        assert_eq!(
            why("final: client program broke the interface: line 3 is not a record").class,
            Client
        );
    }

    const REJECTED: &str = "server error (InvalidArgument): inference request for sequence \
        1048577 to model 'sequence_nobatch' must specify the START flag on the first request \
        of the sequence";

    fn sequence_failure(steps: Vec<WireStep>, idle_us: Option<u64>) -> FailureRecord {
        fixtures::sequence_failure(10_000, REJECTED, steps, idle_us)
    }

    #[test]
    fn a_rejected_step_right_after_an_answered_start_is_the_server_contradicting_itself() {
        // The reaper race: START waited 3,000 ms in the backlog, step 2 rejected 0.3 ms later.
        let record = sequence_failure(
            vec![step(0, 3000, "START", "ok"), step(3000, 0, "", REJECTED)],
            Some(3_000_000),
        );
        let e = classify(&record, ErrorKind::Rejected, &Context::default());
        assert_eq!(e.class, FailureClass::Server, "{}", e.why);
        assert!(e.why.contains("contradicted itself"), "{}", e.why);
        assert!(e.why.contains("step 1 (START)"), "{}", e.why);
        assert!(e.why.contains("answered OK after 3000.0 ms"), "{}", e.why);
        assert!(e.why.contains("max_sequence_idle (3000 ms)"), "{}", e.why);
    }

    #[test]
    fn a_client_that_never_sent_start_or_paused_too_long_is_the_client() {
        let forgot = sequence_failure(vec![step(0, 1, "", REJECTED)], Some(3_000_000));
        let e = classify(&forgot, ErrorKind::Rejected, &Context::default());
        assert_eq!(e.class, FailureClass::Client, "{}", e.why);
        assert!(e.why.contains("without it"), "{}", e.why);
        let slow = sequence_failure(
            vec![step(0, 1, "START", "ok"), step(5000, 0, "", REJECTED)],
            Some(3_000_000),
        );
        let e = classify(&slow, ErrorKind::Rejected, &Context::default());
        assert_eq!(e.class, FailureClass::Client, "{}", e.why);
        assert!(e.why.contains("paused 4999.0 ms"), "{}", e.why);
        // No steps to judge by: a request refused as invalid.
        let mut bare = forgot.clone();
        bare.forensics = None;
        assert_eq!(
            classify(&bare, ErrorKind::Rejected, &Context::default()).class,
            FailureClass::Client
        );
    }

    #[test]
    fn a_failure_while_its_server_ended_is_the_server_s_or_the_platform_s() {
        let mut record = sequence_failure(vec![], None);
        record.actual = "transport error: connection refused".into();
        let end = |reason: &str| Context {
            server_ends: vec![ServerEnd {
                member: "triton-0".into(),
                addresses: vec!["127.0.0.1:8001".into()],
                at_ms: 9_500,
                reason: reason.into(),
            }],
            injected: vec![],
        };
        let e = classify(
            &record,
            ErrorKind::Transport,
            &end("killed by signal 9 (SIGKILL)"),
        );
        assert_eq!(e.class, FailureClass::Server, "{}", e.why);
        assert!(e.why.contains("triton-0 ended"), "{}", e.why);
        let e = classify(&record, ErrorKind::Transport, &end("OOMKilled"));
        assert_eq!(e.class, FailureClass::Infrastructure, "{}", e.why);
        // The server stayed up: the network.
        let e = classify(&record, ErrorKind::Transport, &Context::default());
        assert_eq!(e.class, FailureClass::Infrastructure, "{}", e.why);
        // Another server's end says nothing of this one.
        let mut other = end("killed");
        other.server_ends[0].addresses = vec!["127.0.0.1:9001".into()];
        assert_eq!(
            classify(&record, ErrorKind::Timeout, &other).class,
            FailureClass::Server
        );
    }

    #[test]
    fn a_dead_backend_stub_is_the_server_s_named_by_its_instance() {
        let mut record = sequence_failure(vec![], None);
        // Triton 2.51's answer after a python model's process exited (os._exit in execute).
        record.actual =
            "server error (500): Stub process 'identity_crash_0_0' is not healthy.".into();
        let e = classify(&record, ErrorKind::ServerError, &Context::default());
        assert_eq!(e.class, FailureClass::Server, "{}", e.why);
        assert!(
            e.why
                .contains("Python backend stub process identity_crash_0_0 died"),
            "{}",
            e.why
        );
        // Whatever the transport made of it.
        assert_eq!(
            classify(&record, ErrorKind::Unavailable, &Context::default()).class,
            FailureClass::Server
        );
        // Healthy words are not a dead stub.
        record.actual = "Stub process 'identity_0_0' is healthy".into();
        let e = classify(&record, ErrorKind::ServerError, &Context::default());
        assert!(!e.why.contains("died"), "{}", e.why);
        assert_eq!(dead_backend_stub("no stub here"), None);
    }

    #[test]
    fn by_error_kind_and_inside_an_injected_fault() {
        let mut record = sequence_failure(vec![], None);
        record.actual = "OUTPUT0 [4]".into();
        for (kind, class) in [
            (ErrorKind::WrongAnswer, FailureClass::Server),
            (ErrorKind::ServerError, FailureClass::Server),
            (ErrorKind::Protocol, FailureClass::Server),
            (ErrorKind::Timeout, FailureClass::Server),
            (ErrorKind::Rejected, FailureClass::Client),
            (ErrorKind::Harness, FailureClass::Harness),
        ] {
            assert_eq!(
                classify(&record, kind, &Context::default()).class,
                class,
                "{kind}"
            );
        }
        let window = InjectedWindow {
            name: "kill-triton".into(),
            addresses: vec!["127.0.0.1:8001".into()],
            from_ms: 9_000,
            to_ms: 12_000,
            back_ms: 10_500,
        };
        let during = Context {
            server_ends: vec![],
            injected: vec![window.clone()],
        };
        let class_of = |r: &FailureRecord| classify(r, ErrorKind::WrongAnswer, &during).class;
        assert_eq!(class_of(&record), FailureClass::Injected);
        // A test begun before the recovery that fails after it (a sequence cut by a restart).
        let mut late = record.clone();
        late.at_ms = 20_000;
        late.forensics.as_mut().unwrap().test_started_ms = Some(10_000);
        assert_eq!(class_of(&late), FailureClass::Injected);
        late.forensics.as_mut().unwrap().test_started_ms = Some(11_000);
        assert_eq!(
            classify(&late, ErrorKind::Unavailable, &during).class,
            FailureClass::Injected
        );
        // Begun after the recovery: a wrong answer after recovery is the server's.
        late.forensics.as_mut().unwrap().test_started_ms = Some(12_001);
        assert_eq!(class_of(&late), FailureClass::Server);
        // Begun once the server was READY again, before every client had recovered: a wrong
        // answer is the server's, a request that could not get through still the fault's.
        late.at_ms = 10_900;
        late.forensics.as_mut().unwrap().test_started_ms = Some(10_600);
        assert_eq!(class_of(&late), FailureClass::Server);
        assert_eq!(
            classify(&late, ErrorKind::Unavailable, &during).class,
            FailureClass::Injected
        );
        late.forensics.as_mut().unwrap().test_started_ms = Some(10_400);
        assert_eq!(class_of(&late), FailureClass::Injected);
        // Before the injection, or on another server: not the fault's.
        let mut before = record.clone();
        before.at_ms = 8_999;
        assert_eq!(class_of(&before), FailureClass::Server);
        let mut elsewhere = record.clone();
        elsewhere.server = "127.0.0.1:9001".into();
        assert_eq!(class_of(&elsewhere), FailureClass::Server);
        assert!(
            classify(&record, ErrorKind::WrongAnswer, &during)
                .why
                .contains("kill-triton"),
        );
    }
}
