//! A run's planned faults as a Chaos Mesh `Workflow` (`engine: chaos-mesh`), for a cluster that
//! has Chaos Mesh: pure, nothing here talks to a cluster. The driver does not apply it and this
//! project has never run it against a Chaos Mesh controller: `tests/chaos_mesh.rs` checks the
//! objects against the CRD schemas of chaos-mesh v2.8.3 (vendored under
//! `tests/fixtures/chaos-mesh/`) and the rules of its admission webhook that the objects rely on.
//!
//! One Workflow per run: its entry is a `Parallel` template with one `Serial` branch per faulted
//! member, which alternates `Suspend` templates and chaos templates so that each fault starts at
//! its [`Injection::at`] from the workflow's start. In a Workflow a chaos template lasts its
//! `deadline` (Chaos Mesh's webhook refuses a `duration` inside a workflow's chaos, and a chaos
//! node without a deadline never ends, which would stop its branch there):
//!
//! | kind | chaos | deadline |
//! |---|---|---|
//! | `kill` | PodChaos `pod-kill`, `gracePeriod: 0` | [`INSTANT_HOLD`] |
//! | `restart` | PodChaos `pod-kill`, `gracePeriod: 30` | [`INSTANT_HOLD`] |
//! | `pause` | PodChaos `pod-failure` | the fault's `duration` |
//! | `network` | NetworkChaos `delay` and/or `loss` (in a `Parallel` when both), `direction: both` | the fault's `duration` |
//!
//! Each chaos selects one pod (`mode: one`) in the run's namespace by the labels the kube
//! launcher gives a member's pod ([`RUN_LABEL`], [`MEMBER_LABEL`]); a network fault's `target`
//! is the run's client pods, so the delay or loss is between the server and its clients.

use super::RUN_LABEL;
use super::spec::{CLIENT_ROLE, MEMBER_LABEL, ROLE_LABEL};
use crate::matrix::faults::{FaultKind, Injection, NetworkFault};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

pub const API_VERSION: &str = "chaos-mesh.org/v1alpha1";

/// The Chaos Mesh release whose CRD schemas the objects are checked against (the vendored
/// fixtures name it too, and a test holds the two together).
pub const CHECKED_AGAINST: &str = "chaos-mesh v2.8.3";

/// How long the chaos node of a `kill` or `restart` lasts (its PodChaos exists): time for Chaos
/// Mesh to act on it; a pod-kill is done once, so its end undoes nothing. Shorter when the
/// member's next fault comes sooner.
pub const INSTANT_HOLD: Duration = Duration::from_secs(5);

/// Grace period of a `restart`'s pod-kill, in seconds: Triton's graceful stop, as the local
/// launcher allows a SIGTERM before it kills.
pub const RESTART_GRACE_SECONDS: u32 = 30;

/// The longest name Chaos Mesh can give a Workflow: it labels the Workflow's nodes with it
/// (`chaos-mesh.org/workflow`), and a label value has at most 63 characters.
const MAX_WORKFLOW_NAME: usize = 63;

/// The Workflow's name.
pub fn workflow_name(run_id: &str) -> String {
    format!("triton-stress-{run_id}-faults")
}

/// A run id or namespace that makes no valid Chaos Mesh object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error(
        "run id {run_id:?}: the Workflow's name {name:?} must be lowercase letters, digits and \
         '-', at most {MAX_WORKFLOW_NAME} characters (a run id of at most {longest_run_id})"
    )]
    Workflow {
        run_id: String,
        name: String,
        longest_run_id: usize,
    },
    #[error(
        "namespace {0:?} is not a DNS-1123 label (lowercase letters, digits and '-', at most 63 \
         characters)"
    )]
    Namespace(String),
}

/// Whether `run_id` and `namespace` make valid objects: a Workflow name that is a DNS-1123 label
/// (its nodes carry it as a label value) and a namespace that is one. The error says why not.
pub fn check_names(run_id: &str, namespace: &str) -> Result<(), NameError> {
    let name = workflow_name(run_id);
    if !crate::matrix::is_dns_label(&name) {
        return Err(NameError::Workflow {
            run_id: run_id.to_string(),
            name,
            longest_run_id: MAX_WORKFLOW_NAME - workflow_name("").len(),
        });
    }
    if !crate::matrix::is_dns_label(namespace) {
        return Err(NameError::Namespace(namespace.to_string()));
    }
    Ok(())
}

/// The Chaos Mesh objects that inject `injections` (times from the load phase's start, which the
/// Workflow's creation stands for): one Workflow, or none when there is nothing to inject.
pub fn render(injections: &[Injection], run_id: &str, namespace: &str) -> Vec<Value> {
    if injections.is_empty() {
        return Vec::new();
    }
    let mut by_member: BTreeMap<&str, Vec<&Injection>> = BTreeMap::new();
    for i in injections {
        by_member.entry(i.member.as_str()).or_default().push(i);
    }
    let mut branches = Vec::new();
    let mut templates = Vec::new();
    for (member, mut planned) in by_member {
        planned.sort_by_key(|i| i.at);
        let steps = member_templates(run_id, namespace, member, &planned, &mut templates);
        let name = format!("member-{member}");
        templates.push(json!({ "name": name, "templateType": "Serial", "children": steps }));
        branches.push(name);
    }
    templates.insert(
        0,
        json!({ "name": "faults", "templateType": "Parallel", "children": branches }),
    );
    vec![json!({
        "apiVersion": API_VERSION,
        "kind": "Workflow",
        "metadata": {
            "name": workflow_name(run_id),
            "namespace": namespace,
            "labels": { RUN_LABEL: run_id },
        },
        "spec": { "entry": "faults", "templates": templates },
    })]
}

/// The templates of `member`'s faults (`planned`, by time), appended to `templates` in order:
/// each fault's wait, then its chaos. Returns the names of its branch's steps.
fn member_templates(
    run_id: &str,
    namespace: &str,
    member: &str,
    planned: &[&Injection],
    templates: &mut Vec<Value>,
) -> Vec<String> {
    let mut steps = Vec::new();
    for step in member_steps(planned) {
        let k = step.index + 1;
        if !step.wait.is_zero() {
            let name = format!("wait-{member}-{k}");
            templates.push(json!({
                "name": name,
                "templateType": "Suspend",
                "deadline": go_duration(step.wait),
            }));
            steps.push(name);
        }
        let chaos = chaos_templates(run_id, namespace, member, &step);
        match chaos.as_slice() {
            [one] => steps.push(one["name"].as_str().unwrap_or_default().to_string()),
            _ => {
                // Both at once: a Parallel of the two.
                let name = format!("network-{member}-{k}");
                templates.push(json!({
                    "name": name,
                    "templateType": "Parallel",
                    "children": chaos.iter().map(|c| c["name"].clone()).collect::<Vec<_>>(),
                }));
                steps.push(name);
            }
        }
        templates.extend(chaos);
    }
    steps
}

/// The chaos templates of one of `member`'s faults: one, or a network fault's delay and loss.
fn chaos_templates(run_id: &str, namespace: &str, member: &str, step: &Step) -> Vec<Value> {
    let k = step.index + 1;
    let selector = json!({
        "namespaces": [namespace],
        "labelSelectors": { RUN_LABEL: run_id, MEMBER_LABEL: member },
    });
    let clients = json!({
        "namespaces": [namespace],
        "labelSelectors": { RUN_LABEL: run_id, ROLE_LABEL: CLIENT_ROLE },
    });
    let deadline = go_duration(step.hold);
    let pod_chaos = |prefix: &str, spec: Value| {
        let mut spec = spec;
        spec["mode"] = json!("one");
        spec["selector"] = selector.clone();
        json!({
            "name": format!("{prefix}-{member}-{k}"),
            "templateType": "PodChaos",
            "deadline": deadline,
            "podChaos": spec,
        })
    };
    let network_chaos = |prefix: &str, spec: Value| {
        let mut spec = spec;
        spec["mode"] = json!("one");
        spec["selector"] = selector.clone();
        spec["direction"] = json!("both");
        spec["target"] = json!({ "mode": "all", "selector": clients });
        json!({
            "name": format!("{prefix}-{member}-{k}"),
            "templateType": "NetworkChaos",
            "deadline": deadline,
            "networkChaos": spec,
        })
    };
    let i = step.injection;
    match i.kind {
        FaultKind::Kill => vec![pod_chaos(
            "kill",
            json!({ "action": "pod-kill", "gracePeriod": 0 }),
        )],
        FaultKind::Restart => vec![pod_chaos(
            "restart",
            json!({ "action": "pod-kill", "gracePeriod": RESTART_GRACE_SECONDS }),
        )],
        FaultKind::Pause => vec![pod_chaos("pause", json!({ "action": "pod-failure" }))],
        // Not rendered: `unrenderable` refuses the matrix before rendering.
        FaultKind::Evict | FaultKind::Drain | FaultKind::StoreRestart | FaultKind::ApiOutage => {
            Vec::new()
        }
        FaultKind::Network => network_actions(i.network.as_ref())
            .into_iter()
            .map(|(action, detail)| {
                network_chaos(action, json!({ "action": action, action: detail }))
            })
            .collect(),
    }
}

/// One fault of a member's branch: the wait before it and how long its chaos node lasts.
#[derive(Debug, Clone, PartialEq)]
struct Step<'a> {
    /// Its place among the member's injections (from 0).
    index: usize,
    injection: &'a Injection,
    /// From the end of the previous step (the workflow's start for the first).
    wait: Duration,
    /// The chaos node's deadline.
    hold: Duration,
}

/// A member's injections (by time) as steps: each chaos starts at its `at`, as long as the
/// previous one has ended by then (the matrix's validation keeps a member's faults apart;
/// otherwise the later one starts when the earlier ends).
fn member_steps<'a>(planned: &[&'a Injection]) -> Vec<Step<'a>> {
    let mut end = Duration::ZERO;
    let mut steps = Vec::new();
    for (index, i) in planned.iter().enumerate() {
        let hold = if i.kind.lasts() {
            i.duration
        } else {
            let to_next = planned
                .get(index + 1)
                .map_or(INSTANT_HOLD, |n| n.at.saturating_sub(i.at));
            INSTANT_HOLD.min(to_next)
        };
        let wait = i.at.saturating_sub(end);
        end = end + wait + hold;
        steps.push(Step {
            index,
            injection: i,
            wait,
            hold,
        });
    }
    steps
}

/// A network fault's NetworkChaos actions, each with its detail: `delay` (latency and jitter,
/// latency 0 when only jitter is given) and `loss` (a percentage).
fn network_actions(n: Option<&NetworkFault>) -> Vec<(&'static str, Value)> {
    let Some(n) = n else { return Vec::new() };
    let mut out = Vec::new();
    if n.delay.is_some() || n.jitter.is_some() {
        let mut delay = json!({ "latency": netem_duration(n.delay.unwrap_or_default()) });
        if let Some(j) = n.jitter {
            delay["jitter"] = json!(netem_duration(j));
        }
        out.push(("delay", delay));
    }
    if let Some(loss) = n.loss {
        out.push(("loss", json!({ "loss": percent(loss) })));
    }
    out
}

/// A duration as Go's `time.ParseDuration` reads it, shortest first: `30s`, `1m30s`, `1h`,
/// `1.5s`, `250ms`, `0s`.
pub fn go_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    if d < Duration::from_secs(1) {
        return netem_duration(d);
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out += &format!("{h}h");
    }
    if m > 0 {
        out += &format!("{m}m");
    }
    let nanos = d.subsec_nanos();
    if nanos > 0 {
        let fraction = format!("{nanos:09}");
        out += &format!("{s}.{}s", fraction.trim_end_matches('0'));
    } else if s > 0 {
        out += &format!("{s}s");
    }
    out
}

/// A duration in one unit, as NetworkChaos's `latency` and `jitter` want it
/// (`^[0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h)$`): `2s`, `150ms`, `250us`, `0ms`.
pub fn netem_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        "0ms".into()
    } else if nanos.is_multiple_of(1_000_000_000) {
        format!("{}s", nanos / 1_000_000_000)
    } else if nanos.is_multiple_of(1_000_000) {
        format!("{}ms", nanos / 1_000_000)
    } else if nanos.is_multiple_of(1_000) {
        format!("{}us", nanos / 1_000)
    } else {
        format!("{nanos}ns")
    }
}

/// A fraction as the percentage NetworkChaos's `loss` wants: 0.05 -> "5", 0.125 -> "12.5".
fn percent(fraction: f64) -> String {
    let p = (fraction * 100.0 * 1e6).round() / 1e6;
    format!("{p}")
}

/// The faults this Workflow does not render, one line each: an `evict` or `drain` goes through the
/// Eviction API and its PodDisruptionBudgets, which no chaos kind does, and a `store-restart`
/// is judged by the driver's own probe of the store.
pub fn unrenderable(injections: &[Injection]) -> Vec<String> {
    injections
        .iter()
        .filter_map(|i| {
            let why = match i.kind {
                FaultKind::Evict | FaultKind::Drain => {
                    "Chaos Mesh has no eviction (the Eviction API and its PodDisruptionBudgets)"
                }
                FaultKind::StoreRestart => {
                    "the store's restart is judged by the driver's probe of the store"
                }
                FaultKind::ApiOutage => "it cuts the driver's own access to the API server",
                _ => return None,
            };
            Some(format!(
                "fault {} ({}): {why}; `driver run --launcher kube` injects it",
                i.name,
                i.kind.as_str()
            ))
        })
        .collect()
}

/// Comment lines for the rendered YAML: which fault each chaos template injects, and when.
pub fn describe(injections: &[Injection]) -> Vec<String> {
    let mut by_member: BTreeMap<&str, Vec<&Injection>> = BTreeMap::new();
    for i in injections {
        by_member.entry(i.member.as_str()).or_default().push(i);
    }
    let mut lines = Vec::new();
    for (member, mut planned) in by_member {
        planned.sort_by_key(|i| i.at);
        for step in member_steps(&planned) {
            let i = step.injection;
            lines.push(format!(
                "{member} #{}: {} ({}) at {} for {}",
                step.index + 1,
                i.name,
                i.kind.as_str(),
                crate::matrix::faults::human(i.at),
                go_duration(step.hold)
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn injection(name: &str, member: &str, at: u64, kind: FaultKind, duration: u64) -> Injection {
        Injection {
            name: name.into(),
            fault_index: 0,
            member: member.into(),
            at: S(at),
            kind,
            duration: S(duration),
            recover_within: S(30),
            network: None,
        }
    }

    fn templates(w: &Value) -> BTreeMap<String, Value> {
        w["spec"]["templates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap().to_string(), t.clone()))
            .collect()
    }

    /// The member's Serial branch as (templateType, deadline) per step.
    fn branch(w: &Value, member: &str) -> Vec<(String, String)> {
        let t = templates(w);
        t[&format!("member-{member}")]["children"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let step = &t[c.as_str().unwrap()];
                (
                    step["templateType"].as_str().unwrap().to_string(),
                    step["deadline"].as_str().unwrap_or("-").to_string(),
                )
            })
            .collect()
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        (a.into(), b.into())
    }

    #[test]
    fn a_kill_then_a_pause_on_one_member_wait_for_their_times() {
        let plan = [
            injection("kill-triton", "triton-0", 20, FaultKind::Kill, 0),
            injection("freeze", "triton-0", 50, FaultKind::Pause, 5),
        ];
        let out = render(&plan, "r1", "stress");
        assert_eq!(out.len(), 1);
        let w = &out[0];
        assert_eq!(w["apiVersion"], "chaos-mesh.org/v1alpha1");
        assert_eq!(w["kind"], "Workflow");
        assert_eq!(w["metadata"]["name"], "triton-stress-r1-faults");
        assert_eq!(w["metadata"]["namespace"], "stress");
        assert_eq!(w["metadata"]["labels"]["triton-stress/run"], "r1");
        // The kill's node lasts INSTANT_HOLD (5 s): the pause still starts 50 s in.
        assert_eq!(
            branch(w, "triton-0"),
            [
                pair("Suspend", "20s"),
                pair("PodChaos", "5s"),
                pair("Suspend", "25s"),
                pair("PodChaos", "5s"),
            ]
        );
        let t = templates(w);
        let kill = &t["kill-triton-0-1"]["podChaos"];
        assert_eq!(kill["action"], "pod-kill");
        assert_eq!(kill["gracePeriod"], 0);
        assert_eq!(kill["mode"], "one");
        assert_eq!(
            kill["selector"],
            json!({
                "namespaces": ["stress"],
                "labelSelectors": {"triton-stress/run": "r1", "triton-stress/member": "triton-0"},
            })
        );
        let pause = &t["pause-triton-0-2"]["podChaos"];
        assert_eq!(pause["action"], "pod-failure");
        assert!(
            pause.get("duration").is_none(),
            "a deadline, not a duration"
        );
        assert_eq!(t["faults"]["templateType"], "Parallel");
        assert_eq!(w["spec"]["entry"], "faults");
        assert_eq!(t["faults"]["children"], json!(["member-triton-0"]));
    }

    #[test]
    fn every_step_starts_at_its_injection_time() {
        let plan = [
            injection("a", "t-0", 20, FaultKind::Kill, 0),
            injection("b", "t-0", 22, FaultKind::Restart, 0),
            injection("c", "t-0", 60, FaultKind::Pause, 7),
            injection("d", "t-0", 90, FaultKind::Kill, 0),
        ];
        let refs: Vec<&Injection> = plan.iter().collect();
        let mut clock = Duration::ZERO;
        for (step, i) in member_steps(&refs).iter().zip(&plan) {
            clock += step.wait;
            assert_eq!(clock, i.at, "{} starts at its time", i.name);
            clock += step.hold;
        }
        let holds: Vec<u64> = member_steps(&refs)
            .iter()
            .map(|s| s.hold.as_secs())
            .collect();
        // The first kill's node ends when the restart comes (2 s later).
        assert_eq!(holds, [2, 5, 7, 5]);
    }

    #[test]
    fn restart_is_a_graceful_pod_kill_and_network_has_both_actions_at_once() {
        let mut net = injection("slow", "triton-1", 40, FaultKind::Network, 90);
        net.network = Some(NetworkFault {
            delay: Some(Duration::from_millis(150)),
            jitter: Some(Duration::from_millis(20)),
            loss: Some(0.05),
        });
        let plan = [
            injection("restart", "triton-0", 30, FaultKind::Restart, 0),
            net,
        ];
        let w = &render(&plan, "r1", "ns")[0];
        let t = templates(w);
        assert_eq!(t["restart-triton-0-1"]["podChaos"]["action"], "pod-kill");
        assert_eq!(t["restart-triton-0-1"]["podChaos"]["gracePeriod"], 30);
        assert_eq!(
            t["faults"]["children"],
            json!(["member-triton-0", "member-triton-1"])
        );
        assert_eq!(
            branch(w, "triton-1"),
            [pair("Suspend", "40s"), pair("Parallel", "-")]
        );
        assert_eq!(
            t["network-triton-1-1"]["children"],
            json!(["delay-triton-1-1", "loss-triton-1-1"])
        );
        let delay = &t["delay-triton-1-1"];
        assert_eq!(delay["templateType"], "NetworkChaos");
        assert_eq!(delay["deadline"], "1m30s");
        let spec = &delay["networkChaos"];
        assert_eq!(spec["action"], "delay");
        assert_eq!(spec["delay"], json!({"latency": "150ms", "jitter": "20ms"}));
        assert_eq!(spec["direction"], "both");
        assert_eq!(
            spec["target"]["selector"]["labelSelectors"],
            json!({"triton-stress/run": "r1", "triton-stress/role": "client"})
        );
        assert_eq!(spec["target"]["mode"], "all");
        let loss = &t["loss-triton-1-1"]["networkChaos"];
        assert_eq!(loss["action"], "loss");
        assert_eq!(loss["loss"], json!({"loss": "5"}));
        assert_eq!(
            loss["selector"]["labelSelectors"]["triton-stress/member"],
            "triton-1"
        );
    }

    #[test]
    fn one_network_action_is_a_step_of_its_own() {
        let mut net = injection("jitter", "t-0", 10, FaultKind::Network, 5);
        net.network = Some(NetworkFault {
            jitter: Some(Duration::from_micros(1500)),
            ..Default::default()
        });
        let w = &render(&[net], "r", "ns")[0];
        assert_eq!(
            branch(w, "t-0"),
            [pair("Suspend", "10s"), pair("NetworkChaos", "5s")]
        );
        assert_eq!(
            templates(w)["delay-t-0-1"]["networkChaos"]["delay"],
            json!({"latency": "0ms", "jitter": "1500us"})
        );
    }

    #[test]
    fn template_names_are_unique_dns_names_and_nothing_renders_nothing() {
        let plan = [
            injection("a", "a-1", 10, FaultKind::Kill, 0),
            injection("b", "a-1", 100, FaultKind::Kill, 0),
            injection("c", "a-1-1", 0, FaultKind::Kill, 0),
        ];
        let w = &render(&plan, "r", "ns")[0];
        let names: Vec<&str> = w["spec"]["templates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert!(
            names.iter().all(|n| crate::matrix::is_dns_label(n)),
            "{names:?}"
        );
        // At 0 s: no Suspend before it.
        assert_eq!(branch(w, "a-1-1"), [pair("PodChaos", "5s")]);
        assert!(render(&[], "r", "ns").is_empty());
    }

    #[test]
    fn an_eviction_is_refused_for_chaos_mesh_and_the_other_kinds_are_not() {
        let planned = [
            injection("kill", "t-0", 20, FaultKind::Kill, 0),
            injection("drain-one", "t-1", 30, FaultKind::Evict, 0),
        ];
        let refused = unrenderable(&planned);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0].starts_with("fault drain-one (evict):"),
            "{}",
            refused[0]
        );
        assert!(unrenderable(&planned[..1]).is_empty());
    }

    #[test]
    fn durations_are_written_as_go_reads_them() {
        let ms = Duration::from_millis;
        for (d, go, netem) in [
            (S(30), "30s", "30s"),
            (S(90), "1m30s", "90s"),
            (S(3600), "1h", "3600s"),
            (S(3661), "1h1m1s", "3661s"),
            (ms(250), "250ms", "250ms"),
            (ms(1500), "1.5s", "1500ms"),
            (Duration::from_micros(20), "20us", "20us"),
            (Duration::from_nanos(7), "7ns", "7ns"),
            (Duration::ZERO, "0s", "0ms"),
        ] {
            assert_eq!(go_duration(d), go, "{d:?}");
            assert_eq!(netem_duration(d), netem, "{d:?}");
        }
        assert_eq!(percent(0.05), "5");
        assert_eq!(percent(0.125), "12.5");
        assert_eq!(percent(0.07), "7");
        assert_eq!(percent(1.0), "100");
    }

    #[test]
    fn names_that_make_no_valid_object_are_refused() {
        assert_eq!(check_names("soak-20261121-061512-0a1b", "stress"), Ok(()));
        let long = "a".repeat(43);
        let err = check_names(&long, "stress").unwrap_err();
        assert!(err.to_string().contains("at most 42"), "{err}");
        assert!(check_names(&"a".repeat(42), "stress").is_ok());
        assert!(matches!(
            check_names("Run_1", "stress"),
            Err(NameError::Workflow { .. })
        ));
        assert_eq!(
            check_names("r1", "Stress"),
            Err(NameError::Namespace("Stress".into()))
        );
    }

    #[test]
    fn the_description_names_each_fault_and_its_time() {
        let plan = [
            injection("kill-triton", "triton-0", 20, FaultKind::Kill, 0),
            injection("freeze", "triton-0", 50, FaultKind::Pause, 5),
        ];
        assert_eq!(
            describe(&plan),
            [
                "triton-0 #1: kill-triton (kill) at 20s for 5s",
                "triton-0 #2: freeze (pause) at 50s for 5s"
            ]
        );
    }
}
