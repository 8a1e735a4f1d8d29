//! `faults:`: intermittent failures injected on purpose during the load phase (kill, graceful
//! restart, pause of a server; its network later), and how fast the clients must recover.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::duration::HumanDuration;

/// One fault, injected once (`at`) or repeatedly (`every`) into a server of the run.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// A name unique among the run's faults (a DNS-1123 label); the report and JUnit use it.
    pub name: String,

    /// A launched server group (each injection hits one of its members, picked by the run's
    /// seed) or one server member (`<group>-<index>`). Not an external group: the driver does
    /// not own those servers. `store` for a `store-restart`, `api-server` for an `api-outage`.
    /// An `evict` may also name a client group or one worker (`<group>-<index>`): its pod is
    /// applied again and the member carries on from the counts it reported.
    pub target: String,

    /// When, counted from the start of the load phase (the workers' start), up to 30 days.
    /// Exactly one of `at` and `every`.
    #[serde(default, with = "super::checked::fault_time")]
    #[schemars(with = "Option<HumanDuration>")]
    pub at: Option<Duration>,

    /// Inject at `every`, 2 × `every`, … into the load phase, as long as the fault and its
    /// recovery fit before the run's end (longer than zero, up to 30 days).
    #[serde(default, with = "super::checked::fault_every")]
    #[schemars(with = "Option<HumanDuration>")]
    pub every: Option<Duration>,

    /// Each injection comes up to this much later than planned, at random (seeded by
    /// `run.seed`: the same matrix injects at the same times every night); up to 30 days.
    #[serde(default, with = "super::checked::fault_time")]
    #[schemars(with = "Option<HumanDuration>")]
    pub jitter: Option<Duration>,

    /// What happens to the server.
    pub kind: FaultKind,

    /// How long a `pause` or `network` fault lasts (required for them, refused for `kill` and
    /// `restart`): longer than zero, up to 30 days.
    #[serde(default, with = "super::checked::fault_length")]
    #[schemars(with = "Option<HumanDuration>")]
    pub duration: Option<Duration>,

    /// The network's misbehaviour, for `kind: network`.
    pub network: Option<NetworkFault>,

    /// What the run expects of the clients.
    #[serde(default)]
    pub expect: FaultExpectation,
}

/// What a fault does to its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// SIGKILL to the server (and its model processes); the launcher starts it again on the
    /// same address at once.
    Kill,
    /// SIGTERM (a graceful stop: Triton finishes what is in flight), then the launcher starts
    /// it again on the same address.
    Restart,
    /// SIGSTOP to the server process for `duration`, then SIGCONT: a server that hangs (its
    /// python model processes run on). Not the whole container: freezing tritonserver 2.51
    /// together with its python backend stubs crashed it in 2 of 3 tries.
    Pause,
    /// Delay, jitter or loss between the server and its clients for `duration`.
    Network,
    /// The server's or worker's pod evicted through the Kubernetes Eviction API (kube launcher
    /// only): a graceful stop that the run's PodDisruptionBudgets may refuse (the fault is then
    /// `blocked`, not failed); the launcher creates the pod again, as after `restart`. A
    /// worker's recovery is its new process running (after its pre-flight), its counts
    /// carried on from what it reported.
    Evict,
    /// The node of the server's or worker's pod drained for `duration` (kube launcher only,
    /// with deploy/drain's ClusterRole): cordoned, every pod of the run there evicted
    /// (its budgets honoured), and uncordoned at the end. The evicted pods are applied again
    /// and wait for a node; on a single-node cluster until the uncordon, where the recovery
    /// counts from. Refused for the node that holds the driver itself.
    Drain,
    /// The status store's Postgres pod deleted (kube launcher only; `target: store`): its
    /// StatefulSet brings it back on the same volume. Recovery is every worker's writes
    /// accepted again.
    #[serde(rename = "store-restart")]
    StoreRestart,
    /// The driver's own access to the Kubernetes API server cut for `duration` (kube launcher
    /// only; `target: api-server`): its API calls go through a proxy of its own, which closes
    /// every connection meanwhile. The run must ride through (its pod watch resumes).
    #[serde(rename = "api-outage")]
    ApiOutage,
}

/// The `target` of a `store-restart`: the run's status store, not a server.
pub const STORE_TARGET: &str = "store";
/// The `target` of an `api-outage`: the Kubernetes API server as the driver reaches it.
pub const API_SERVER_TARGET: &str = "api-server";

/// The kinds that act on something other than a server: each with its fixed `target` and
/// what that target is.
const FIXED_TARGETS: [(FaultKind, &str, &str); 2] = [
    (
        FaultKind::StoreRestart,
        STORE_TARGET,
        "the run's status store",
    ),
    (
        FaultKind::ApiOutage,
        API_SERVER_TARGET,
        "the driver's access to the Kubernetes API server",
    ),
];

impl FaultKind {
    /// The target this kind takes instead of a server, and what it is (None: a server member
    /// or group).
    pub fn fixed_target(self) -> Option<(&'static str, &'static str)> {
        FIXED_TARGETS
            .iter()
            .find(|(kind, ..)| *kind == self)
            .map(|&(_, target, what)| (target, what))
    }

    /// The kind whose fixed target `target` is.
    pub fn fixed_to(target: &str) -> Option<FaultKind> {
        FIXED_TARGETS
            .iter()
            .find(|(_, fixed, _)| *fixed == target)
            .map(|&(kind, ..)| kind)
    }
}

impl FaultKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Restart => "restart",
            FaultKind::Pause => "pause",
            FaultKind::Network => "network",
            FaultKind::Evict => "evict",
            FaultKind::Drain => "drain",
            FaultKind::StoreRestart => "store-restart",
            FaultKind::ApiOutage => "api-outage",
        }
    }

    /// Whether the fault lasts a `duration` (the others are instants): its recovery counts
    /// from its end.
    pub fn lasts(self) -> bool {
        matches!(
            self,
            FaultKind::Pause | FaultKind::Network | FaultKind::ApiOutage | FaultKind::Drain
        )
    }

    /// Whether what it hit is back only once a probe says so (a server READY, a worker
    /// running, the store writing again): it was stopped or evicted. A pause, a network fault
    /// or an API outage leaves its target running: back at the fault's end.
    pub fn probed(self) -> bool {
        !matches!(
            self,
            FaultKind::Pause | FaultKind::Network | FaultKind::ApiOutage
        )
    }

    /// Whether it may target workers (a client group or member): it evicts pods, which the
    /// kube launcher applies again, and the member carries on from what it reported.
    pub fn targets_workers(self) -> bool {
        matches!(self, FaultKind::Evict | FaultKind::Drain)
    }
}

/// A lossy or slow network between a server and its clients.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkFault {
    /// Added to every packet's way (up to 30 days).
    #[serde(default, with = "super::checked::fault_time")]
    #[schemars(with = "Option<HumanDuration>")]
    pub delay: Option<Duration>,
    /// Random extra delay up to this (up to 30 days).
    #[serde(default, with = "super::checked::fault_time")]
    #[schemars(with = "Option<HumanDuration>")]
    pub jitter: Option<Duration>,
    /// The fraction of packets dropped (0.05 = 5%).
    #[serde(default, deserialize_with = "super::checked::loss")]
    pub loss: Option<f64>,
}

/// What a fault's clients must do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FaultExpectation {
    /// Every client of the server has a good answer again within this: counted from the
    /// injection for `kill` and `restart` (the server's start-up is part of the recovery), from
    /// the fault's end for `pause` and `network`. Default `60s`, up to a day.
    #[serde(with = "super::checked::recovery", default = "default_recover_within")]
    #[schemars(with = "HumanDuration")]
    pub recover_within: Duration,
}

impl Default for FaultExpectation {
    fn default() -> Self {
        FaultExpectation {
            recover_within: default_recover_within(),
        }
    }
}

fn default_recover_within() -> Duration {
    Duration::from_secs(60)
}

impl Fault {
    /// From the injection to the end of the time its recovery is allowed.
    pub fn window(&self) -> Duration {
        self.duration.unwrap_or_default() + self.expect.recover_within
    }
}

/// One planned injection: a fault hitting one server member at one time.
#[derive(Debug, Clone, PartialEq)]
pub struct Injection {
    /// The fault's name, with `#N` (from 1) for a repeated fault: unique in the run.
    pub name: String,
    /// The fault's index in `faults:` (for diagnostics: `faults[i]`).
    pub fault_index: usize,
    /// The server member it hits.
    pub member: String,
    /// When, from the start of the load phase.
    pub at: Duration,
    pub kind: FaultKind,
    /// How long it lasts (zero for `kill` and `restart`).
    pub duration: Duration,
    pub recover_within: Duration,
    pub network: Option<NetworkFault>,
}

impl Injection {
    /// When its recovery is counted from: the injection for an instant fault (a kill's
    /// recovery includes the server's start-up), the fault's end for a lasting one.
    pub fn recovery_from(&self) -> Duration {
        self.at + self.duration
    }

    /// The end of the time its recovery is allowed.
    pub fn window_end(&self) -> Duration {
        self.recovery_from() + self.recover_within
    }
}

/// The run's seed when the matrix gives none: FNV-1a of its name, so the same matrix draws
/// the same each night.
pub fn default_seed(run_name: &str) -> u64 {
    let mut h = fnv::FnvHasher::default();
    std::hash::Hasher::write(&mut h, run_name.as_bytes());
    std::hash::Hasher::finish(&h)
}

/// Every injection of `faults` within a load phase of `load` (pure): `members_of` says which
/// server members a target names (a group: its members; a member: itself; None: neither).
/// Only injections whose allowed recovery ends within the load phase are planned. Each fault
/// draws its jitter and members from its own stream of `seed` (adding a fault does not move
/// the others).
pub fn schedule(
    faults: &[Fault],
    members_of: impl Fn(&str) -> Option<Vec<String>>,
    load: Duration,
    seed: u64,
) -> Vec<Injection> {
    use rand::{Rng, SeedableRng};
    let mut out = Vec::new();
    for (fault_index, f) in faults.iter().enumerate() {
        let Some(members) = members_of(&f.target).filter(|m| !m.is_empty()) else {
            continue;
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ default_seed(&f.name));
        let planned: Vec<Duration> = match (f.at, f.every) {
            (Some(at), _) => vec![at],
            (None, Some(every)) if !every.is_zero() => (1u32..)
                .map(|n| every * n)
                .take_while(|t| *t + f.window() <= load)
                .take(10_000)
                .collect(),
            _ => Vec::new(),
        };
        let repeated = f.every.is_some() && f.at.is_none();
        for (n, at) in planned.into_iter().enumerate() {
            let jitter = f
                .jitter
                .filter(|j| !j.is_zero())
                .map(|j| Duration::from_micros(rng.random_range(0..=j.as_micros() as u64)))
                .unwrap_or_default();
            let member = members[rng.random_range(0..members.len())].clone();
            let at = at + jitter;
            if at + f.window() > load {
                continue;
            }
            out.push(Injection {
                name: if repeated {
                    format!("{}#{}", f.name, n + 1)
                } else {
                    f.name.clone()
                },
                fault_index,
                member,
                at,
                kind: f.kind,
                duration: if f.kind.lasts() {
                    f.duration.unwrap_or_default()
                } else {
                    Duration::ZERO
                },
                recover_within: f.expect.recover_within,
                network: f.network.clone(),
            });
        }
    }
    out.sort_by(|a, b| (a.at, &a.name).cmp(&(b.at, &b.name)));
    out
}

/// Two injections on one member whose windows (injection to allowed recovery) overlap: the
/// later one, and the one it overlaps.
pub fn first_overlap(injections: &[Injection]) -> Option<(&Injection, &Injection)> {
    for (i, later) in injections.iter().enumerate() {
        if let Some(earlier) = injections[..i]
            .iter()
            .find(|e| e.member == later.member && later.at < e.window_end())
        {
            return Some((later, earlier));
        }
    }
    None
}

/// A duration as the matrix writes it.
pub fn human(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(yaml: &str) -> Fault {
        serde_saphyr::from_str(yaml).expect("a fault")
    }

    fn members(target: &str) -> Option<Vec<String>> {
        match target {
            "triton" => Some(vec!["triton-0".into(), "triton-1".into()]),
            "triton-0" | "triton-1" => Some(vec![target.into()]),
            _ => None,
        }
    }

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn one_at_and_a_repeated_fault_fit_the_load_phase() {
        let faults = [
            fault(
                "{name: kill, target: triton-0, at: 20s, kind: kill, expect: {recover_within: 30s}}",
            ),
            fault(
                "{name: stall, target: triton-1, every: 40s, kind: pause, duration: 5s, expect: {recover_within: 10s}}",
            ),
        ];
        let plan = schedule(&faults, members, S(120), 7);
        let names: Vec<(&str, &str, u64)> = plan
            .iter()
            .map(|i| (i.name.as_str(), i.member.as_str(), i.at.as_secs()))
            .collect();
        // The third pause (at 120 s) would end after the load phase.
        assert_eq!(
            names,
            [
                ("kill", "triton-0", 20),
                ("stall#1", "triton-1", 40),
                ("stall#2", "triton-1", 80)
            ]
        );
        assert_eq!(plan[1].recovery_from(), S(45));
        assert_eq!(plan[1].window_end(), S(55));
        assert_eq!(plan[0].duration, Duration::ZERO);
        assert_eq!(first_overlap(&plan), None);
    }

    #[test]
    fn jitter_and_group_members_are_drawn_from_the_seed() {
        let faults = [fault(
            "{name: chaos, target: triton, every: 10s, jitter: 2s, kind: kill, expect: {recover_within: 5s}}",
        )];
        let a = schedule(&faults, members, S(600), 1);
        let b = schedule(&faults, members, S(600), 1);
        let c = schedule(&faults, members, S(600), 2);
        assert_eq!(a, b, "the same seed, the same plan");
        assert_ne!(a, c, "another seed, another plan");
        assert!(a.len() > 50);
        for (n, i) in a.iter().enumerate() {
            let planned = S(10 * (n as u64 + 1));
            assert!(i.at >= planned && i.at <= planned + S(2), "{i:?}");
        }
        let on_0 = a.iter().filter(|i| i.member == "triton-0").count();
        assert!(on_0 > 10 && on_0 < a.len() - 10, "both members are hit");
    }

    #[test]
    fn windows_that_overlap_on_one_member_are_found() {
        let faults = [
            fault(
                "{name: a, target: triton-0, at: 10s, kind: pause, duration: 5s, expect: {recover_within: 10s}}",
            ),
            fault("{name: b, target: triton-1, at: 12s, kind: kill}"),
            fault("{name: c, target: triton-0, at: 24s, kind: kill}"),
        ];
        let plan = schedule(&faults, members, S(600), 0);
        let (later, earlier) = first_overlap(&plan).expect("c overlaps a");
        assert_eq!((later.name.as_str(), earlier.name.as_str()), ("c", "a"));
        let apart = [
            faults[0].clone(),
            fault("{name: c, target: triton-0, at: 25s, kind: kill}"),
        ];
        assert_eq!(first_overlap(&schedule(&apart, members, S(600), 0)), None);
    }
}
