//! The launcher interface: how the driver starts, watches and stops a run's members. The local
//! launcher runs them as processes on this machine; the Kubernetes launcher runs them as pods.

pub mod diagnostics;
pub mod external;
pub mod kube;
pub mod local;
pub mod logs;
pub mod packet_filter;
pub mod proxy;

pub use diagnostics::MemberDiagnostics;

use crate::matrix::faults::{Fault, Injection};
use crate::matrix::{ClientMember, FieldPath, ServerMember, ServerTemplate};
use crate::plan::{RunPlan, ServerEndpoint, WorkerAssignment};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
pub use stress_common::contract::STORE_URL_ENV;

/// A launched server's metrics port accepts a connection within this, or it is not sampled.
pub const LOCAL_CONNECT: Duration = Duration::from_millis(250);

/// Where a server's resident memory is read, for the report's memory judge.
#[derive(Debug, Clone)]
pub enum ServerMemory {
    /// A local process and its descendants (tritonserver and its python backend stubs): the
    /// sum of their resident sets, from /proc.
    ProcessTree(u32),
    /// A pod's server container: its cgroup's anonymous and shared memory.
    Pod(kube::memory::PodMemory),
}

/// What a member's process (a local process, or a pod's container) used of the CPU so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuUse {
    /// Its threads' time on a CPU (schedstat: nanoseconds; /proc/PID/stat's clock ticks are
    /// 10 ms, more than a lightly loaded worker uses in the driver's half-second look).
    pub used: Duration,
    /// How long its CPU limit held it back (a container's cgroup throttling); None: no limit
    /// or not known.
    pub throttled: Option<Duration>,
    /// Stopped by a signal or a tracer (state T or t).
    pub stopped: bool,
}

impl CpuUse {
    /// From the member's main process's /proc/PID/stat line (the first such line: its state)
    /// and the schedstat lines of its processes' threads (/proc/PID/task/*/schedstat; other
    /// lines are skipped); None without a stat line or any schedstat line.
    pub fn from_proc(lines: &str) -> Option<Self> {
        let mut stopped = None;
        let mut used_ns = None;
        for line in lines.lines() {
            if let Some(state) = stat_state(line) {
                stopped.get_or_insert(matches!(state, 'T' | 't'));
            } else if let Some(ns) = schedstat_run_ns(line) {
                used_ns = Some(used_ns.unwrap_or(0) + ns);
            }
        }
        Some(Self {
            used: Duration::from_nanos(used_ns?),
            throttled: None,
            stopped: stopped?,
        })
    }
}

/// The state letter and the parent of a /proc/PID/stat line ("pid (comm) S ppid ..."; comm
/// may hold spaces and parentheses, so they are the first fields after the last ')').
pub fn stat_state_and_parent(line: &str) -> Option<(char, u32)> {
    let (head, after) = line.rsplit_once(')')?;
    head.split_once(" (")?.0.parse::<u32>().ok()?;
    let mut fields = after.split_whitespace();
    let state = fields.next()?.chars().next()?;
    Some((state, fields.next()?.parse().ok()?))
}

fn stat_state(line: &str) -> Option<char> {
    stat_state_and_parent(line).map(|(state, _)| state)
}

/// The time on a CPU (ns) of a schedstat line: "run_ns wait_ns timeslices".
fn schedstat_run_ns(line: &str) -> Option<u64> {
    let fields: Vec<u64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    match fields[..] {
        [run, _, _] => Some(run),
        _ => None,
    }
}

/// One reading of a server's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryReading {
    pub resident_bytes: u64,
    /// The limit it runs under (a pod container's cgroup); None: none, or not known.
    pub limit_bytes: Option<u64>,
}

impl ServerMemory {
    /// Its memory now (None: not readable now, e.g. the process or pod is gone).
    pub async fn read(&self) -> Option<MemoryReading> {
        match self {
            ServerMemory::ProcessTree(pid) => {
                local::process_tree_rss_bytes(*pid).map(|resident_bytes| MemoryReading {
                    resident_bytes,
                    limit_bytes: None,
                })
            }
            ServerMemory::Pod(pod) => pod.memory().await.map(|m| MemoryReading {
                resident_bytes: m.resident,
                limit_bytes: m.limit,
            }),
        }
    }

    /// Whether both read the same process or pod container.
    pub fn same_source(&self, other: &ServerMemory) -> bool {
        match (self, other) {
            (ServerMemory::ProcessTree(a), ServerMemory::ProcessTree(b)) => a == b,
            (ServerMemory::Pod(a), ServerMemory::Pod(b)) => a.same_container(b),
            _ => false,
        }
    }
}

/// A member that ended, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberExit {
    pub member_id: String,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// The launcher's own words when it knows more than a status (e.g. the kubelet's
    /// `OOMKilled`, `ErrImageNeverPull`).
    pub reason: Option<String>,
}

impl MemberExit {
    /// An end known only by the launcher's words (no exit code or signal seen).
    pub fn because(member_id: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            member_id: member_id.into(),
            code: None,
            signal: None,
            reason: Some(reason.into()),
        }
    }

    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Neither an exit code nor a signal is known (e.g. a pod deleted before its container's
    /// status was reported).
    pub fn status_unknown(&self) -> bool {
        self.code.is_none() && self.signal.is_none()
    }

    pub fn describe(&self) -> String {
        if let Some(reason) = &self.reason {
            return reason.clone();
        }
        match (self.code, self.signal) {
            (Some(c), _) => format!("exited with code {c}"),
            (None, Some(s)) => format!("killed by signal {s} ({})", signal_name(s)),
            (None, None) => "ended (status unknown)".into(),
        }
    }
}

pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => "signal",
    }
}

/// Why a launcher cannot inject a fault, and which of the fault's fields is the reason: a
/// matrix that asks for it is bad input naming that field, before anything starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Uninjectable {
    /// The launcher does not inject faults of this kind (the field `kind`).
    #[error("{0}")]
    Kind(String),
    /// The launcher injects the kind, but this machine lacks what one of the fault's settings
    /// needs (`field`, e.g. `network.loss`: iptables run as root).
    #[error("{why}")]
    Setting { field: &'static str, why: String },
}

/// A template whose member this launcher cannot start as written (a binary that is not there,
/// a model repository that is no directory, an image given to a launcher of processes), with
/// the template's field that is the reason: bad input, refused before anything starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct Unlaunchable {
    /// The field, from the matrix's root (`server_templates.cpu.model_repositories[0]`).
    pub field: FieldPath,
    pub why: String,
}

impl Uninjectable {
    /// The fault's field that a refusal names.
    pub fn field(&self) -> &'static str {
        match self {
            Uninjectable::Kind(_) => "kind",
            Uninjectable::Setting { field, .. } => field,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{member}: {reason}")]
    Member { member: String, reason: String },
    /// The cluster refused the fault on purpose (a PodDisruptionBudget refused an eviction):
    /// the fault is blocked, neither injected nor failed.
    #[error("{member}: {reason}")]
    Blocked { member: String, reason: String },
    #[error("{0}")]
    Setup(String),
}

/// Swept models' original config.pbtxt files as a server template's servers see them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelConfigs {
    /// Each model found: the index of the first of the template's `model_repositories` that
    /// holds `<model>/config.pbtxt`, and the file's text. A model in none is absent.
    pub found: BTreeMap<String, (usize, String)>,
    /// The repositories looked in, in order, as the launcher names them (local: the paths
    /// resolved against the matrix's directory; kube: paths in the pod).
    pub looked_in: Vec<String>,
}

/// Why a launcher could not read model configs (a model that is missing is no error: it is
/// absent from [`ModelConfigs::found`]).
#[derive(Debug, thiserror::Error)]
pub enum ReadConfigsError {
    #[error("the {0} launcher does not read model configs")]
    Unsupported(&'static str),
    #[error("{0}")]
    Launch(#[from] LaunchError),
    /// The kube launcher's reader pod did not end well (its exit and log tail).
    #[error("model config reader pod {pod}: {why}")]
    Reader { pod: String, why: String },
    /// The reader pod's log is not what its script prints.
    #[error("model config reader pod {pod}: {error}")]
    ReaderLog {
        pod: String,
        error: kube::ReaderLogError,
    },
}

/// What a sweep asks a launcher for: the sweep's own run (which reads the swept models'
/// originals) or a variant's.
pub struct LaunchFor<'a> {
    /// The run's directory.
    pub dir: &'a std::path::Path,
    pub run_id: &'a str,
    /// The run's matrix (a sweep variant's carries its mounted configs).
    pub matrix: &'a crate::matrix::Matrix,
    /// The run's matrix file, as written.
    pub matrix_file: &'a std::path::Path,
}

/// A launcher being made (a kube launcher applies its run's objects first).
pub type LaunchFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Box<dyn Launcher>, LaunchError>>>>;

/// Makes the launcher of one run of a sweep.
pub type LauncherFor<'a> = dyn Fn(LaunchFor<'_>) -> LaunchFuture + 'a;

/// What an injection took down besides its target, and what the cluster kept: a drain evicts
/// every pod of the run on its node, as far as their disruption budgets allow.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Injected {
    /// The other members whose pods it evicted (applied again, like the target's).
    pub also_hit: Vec<String>,
    /// Why a pod there was not evicted, one line each.
    pub kept: Vec<String>,
}

/// What ending a lasting fault showed the launcher alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultEnded {
    /// Packets a network fault's loss dropped (the packet filter's count).
    pub dropped_packets: Option<u64>,
}

#[async_trait::async_trait]
pub trait Launcher: Send {
    fn name(&self) -> &'static str;

    /// The driver's address as this launcher's servers reach it, where the run's OTLP
    /// receiver listens (None: they cannot reach the driver, and traced requests' server
    /// spans are not received).
    fn span_receiver_host(&self) -> Option<std::net::IpAddr> {
        None
    }

    /// Starts a server; does not wait for it to be ready.
    async fn start_server(&mut self, server: &ServerMember) -> Result<(), LaunchError>;

    /// Waits until every started server is ready and says where clients reach each (a pod's
    /// address is known only once it runs); the error names the first that is not, and why.
    async fn wait_servers_ready(
        &mut self,
        timeout: Duration,
    ) -> Result<Vec<ServerEndpoint>, LaunchError>;

    async fn start_client(
        &mut self,
        client: &ClientMember,
        assignment: &WorkerAssignment,
    ) -> Result<(), LaunchError>;

    /// Members that ended since the last call.
    async fn exited(&mut self) -> Vec<MemberExit>;

    /// Returns when a member may have ended, so the poll loop looks at once instead of at its
    /// next tick (fail-fast within a fraction of the poll interval). May return spuriously;
    /// by default never (the tick alone).
    async fn member_may_have_ended(&mut self) {
        std::future::pending::<()>().await
    }

    /// The run was judged failed just now. A launcher whose members' ends are reported late
    /// (a pod's, by the kubelet) counts the time it allows them for the report from here, so
    /// that time overlaps the workers' final reports instead of following them.
    fn failure_judged(&mut self) {}

    /// Asks every client to stop (SIGTERM) and waits up to `grace` for each; then kills.
    async fn stop_clients(&mut self, grace: Duration) -> Vec<MemberExit>;

    /// Stops every member still running: the failure path. Clients get SIGTERM and up to
    /// `grace` to flush their records, then SIGKILL; servers (their metrics already read) may
    /// be ended at once rather than unload every model.
    async fn stop_all(&mut self, grace: Duration);

    /// Stops the servers after the clients are done: the success path.
    async fn stop_servers(&mut self, grace: Duration);

    /// The last step, after diagnostics and the report: removes what the run left behind except
    /// the `keep` members (failed ones and the servers they talked to, kept for inspection).
    /// Processes leave nothing but their logs, which stay.
    async fn cleanup(&mut self, _keep: &BTreeSet<String>) {}

    /// What the report shows of a member: exit, log tail, reproduce command, where it ran (and
    /// for a pod its status, events and kubectl commands). Server metrics are not read here.
    async fn diagnostics(&mut self, member_id: &str) -> MemberDiagnostics;

    /// Whether a server answers `/v2/health/live` within `timeout`; the error says how it did not.
    async fn server_live(
        &mut self,
        member_id: &str,
        timeout: Duration,
    ) -> Result<(), stress_common::tritonserver::ProbeError>;

    /// Triton's own /metrics text of a server, while it runs.
    async fn server_metrics(&mut self, member_id: &str) -> Option<String>;

    /// The shell line that starts the member again by hand.
    fn command_line(&self, member_id: &str) -> Option<String>;

    /// Where a started member runs, for people and tests: `pid 1234`, or a pod's name.
    fn locate(&self, member_id: &str) -> Option<String>;

    /// The CPU a running member has used so far (None: not known here): tells a hung worker
    /// from a busy one, and a pod's from one its CPU limit starves.
    async fn cpu_use(&mut self, _member_id: &str) -> Option<CpuUse> {
        None
    }

    /// Where a launched server's memory is read (None: nowhere, e.g. an external server).
    fn server_memory(&self, _member_id: &str) -> Option<ServerMemory> {
        None
    }

    /// A server's log lines timed within `[from_ms, to_ms]` (none when its log cannot be read;
    /// [`logs::excerpt`] cuts them to what a report keeps).
    async fn server_log_between(
        &mut self,
        _member_id: &str,
        _from_ms: i64,
        _to_ms: i64,
    ) -> Vec<String> {
        Vec::new()
    }

    /// Whether this launcher can inject `fault` (the error says what it would need, and for
    /// which of the fault's fields): checked for every fault of the matrix before anything
    /// starts.
    fn can_inject(&self, fault: &Fault) -> Result<(), Uninjectable> {
        Err(Uninjectable::Kind(format!(
            "the {} launcher does not inject {} faults",
            self.name(),
            fault.kind.as_str()
        )))
    }

    /// The templates of `plan`'s members this launcher could not start (checked for each before
    /// anything starts): none unless the launcher knows better before it tries.
    fn unlaunchable(&self, _plan: &RunPlan) -> Vec<Unlaunchable> {
        Vec::new()
    }

    /// The run's planned injections, told before any server starts: a launcher puts in place
    /// what they need (for a network fault, a proxy between the server and its clients).
    fn plan_faults(&mut self, _injections: &[Injection]) {}

    /// Injects a fault into a started server and returns at once: a killed server is started
    /// again on the same address at once, a gracefully stopped one (`restart`) once it has
    /// ended (seen by [`Launcher::exited`], which does not report it), a paused one stays
    /// paused until [`Launcher::end_fault`] (or, should the driver die, its guardian resumes it).
    async fn inject(&mut self, injection: &Injection) -> Result<Injected, LaunchError> {
        Err(LaunchError::Member {
            member: injection.member.clone(),
            reason: format!("the {} launcher does not inject faults", self.name()),
        })
    }

    /// Ends a lasting fault on `member` (a pause: the server runs on; a network fault: the
    /// bytes flow as before); says what the fault did that only the launcher saw.
    async fn end_fault(&mut self, _member: &str) -> Result<FaultEnded, LaunchError> {
        Ok(FaultEnded::default())
    }

    /// Reads each of `models`' config.pbtxt from the template's `model_repositories` as its
    /// servers would see them (the first repository that has it), before any server starts:
    /// a sweep's originals. Local: the files; kube: a short-lived pod built like the server's.
    async fn read_model_configs(
        &mut self,
        _template: &ServerTemplate,
        _models: &[String],
    ) -> Result<ModelConfigs, ReadConfigsError> {
        Err(ReadConfigsError::Unsupported(self.name()))
    }

    /// Whether a started member's process runs yet (a pod may still wait for a node or its
    /// image); a process does from its start.
    fn is_running(&self, _member_id: &str) -> bool {
        true
    }
}

/// What of `plan` the launcher cannot start ([`Launcher::unlaunchable`]), each line located in
/// `matrix`'s file: checked before anything starts.
pub fn unlaunchable(
    matrix: &crate::matrix::Matrix,
    plan: &RunPlan,
    launcher: &dyn Launcher,
) -> Vec<String> {
    launcher
        .unlaunchable(plan)
        .into_iter()
        .map(|u| format!("{}: {}", matrix.locate(&u.field), u.why))
        .collect()
}

/// The faults of `matrix` that a launcher cannot inject (`can_inject` says why), each named
/// by the field that is the reason (its kind, or a setting this machine cannot give it):
/// checked before anything starts, also before a launcher exists.
pub fn uninjectable(
    matrix: &crate::matrix::Matrix,
    can_inject: impl Fn(&crate::matrix::faults::Fault) -> Result<(), Uninjectable>,
) -> Vec<String> {
    let mut refused = Vec::new();
    for (index, f) in matrix.faults.iter().enumerate() {
        if let Err(why) = can_inject(f) {
            refused.push(format!(
                "{}: fault {} ({}) cannot be injected: {why}",
                matrix.locate_fault(index, why.field()),
                f.name,
                f.kind.as_str()
            ));
        }
    }
    refused
}
