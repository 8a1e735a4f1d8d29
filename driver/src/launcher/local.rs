//! The embedded default: every server is a real tritonserver process and every client a worker
//! process on this machine, bound to loopback. Each process's stdout and stderr go to
//! `<run dir>/logs/<member>.log`; trace files to `<run dir>/traces/`.

use super::diagnostics::{MemberDiagnostics, MemberEnd};
use super::packet_filter::{LossRules, PacketLoss};
use super::proxy::{FaultProxy, Shaping};
use super::{FaultEnded, LaunchError, Launcher, MemberExit, STORE_URL_ENV, Unlaunchable};
use crate::matrix::faults::{Fault, FaultKind, Injection};
use crate::matrix::{
    ARTIFACT_AUTO, ClientMember, ClientTemplate, FieldPath, ServerMember, ServerTemplate,
};
use crate::plan::{RunPlan, ServerEndpoint, WorkerAssignment, worker_args};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use stress_common::tritonserver::{self, ServerSpec, TritonServer, shell_quote, tail_lines};

/// How many log lines a failed member's diagnostics keep.
pub const LOG_TAIL_LINES: usize = 50;

struct Client {
    child: tokio::process::Child,
    command: String,
}

pub struct LocalLauncher {
    run_dir: PathBuf,
    /// Where relative paths in the matrix are resolved.
    matrix_dir: PathBuf,
    servers: BTreeMap<String, TritonServer>,
    clients: BTreeMap<String, Client>,
    exits: BTreeMap<String, MemberExit>,
    /// SIGCHLD: a child of the driver (a server or a worker) ended; None until first asked
    /// for, or when it cannot be listened to (the poll tick still sees exits).
    child_ended: Option<tokio::signal::unix::Signal>,
    /// Servers stopped on purpose (an injected restart), started again once they have ended;
    /// killed when still running at the deadline.
    restarting: BTreeMap<String, std::time::Instant>,
    /// Servers paused by an injected fault, each with its guardian: a shell that resumes the
    /// server at the fault's planned end, or at once when the driver dies (a stopped process
    /// ignores its pending parent-death SIGTERM until it is resumed).
    paused: BTreeMap<String, tokio::process::Child>,
    /// Servers a planned network fault hits: their clients reach them through a proxy.
    proxied: BTreeSet<String>,
    /// Those servers' proxies, gRPC and HTTP, from the moment they are ready.
    proxies: BTreeMap<String, [FaultProxy; 2]>,
    /// Servers whose clients' packets a network fault drops, each with its rules' guardian.
    lossy: BTreeMap<String, PacketLoss>,
    /// How many times each server was started (an injected fault starts it again): each
    /// process writes its own trace file, since a new one's trace ids start again.
    starts: BTreeMap<String, u32>,
}

const TRACE_CONFIG: &str = "--trace-config";
const TRACE_FILE: &str = "triton,file=";

/// The trace file of a server's `start`th process (1: the first) in `dir`: `<server>.json`,
/// then `<server>@2.json`, ... (Triton adds `.0`, `.1`, ... with a log frequency).
pub fn trace_file(dir: &Path, server: &str, start: u32) -> PathBuf {
    if start <= 1 {
        dir.join(format!("{server}.json"))
    } else {
        dir.join(format!("{server}@{start}.json"))
    }
}

/// The trace files among `names` (of the traces directory) that `server`'s processes wrote:
/// one list per process in the order they started, each its file then its numbered files in
/// order. Trace ids are unique within a process only.
pub fn trace_files_by_start(names: &[String], server: &str) -> Vec<Vec<String>> {
    let mut by_start: BTreeMap<u32, Vec<(Option<u32>, &String)>> = BTreeMap::new();
    for name in names {
        let Some(rest) = name.strip_prefix(server) else {
            continue;
        };
        let (start, rest) = match rest.strip_prefix('@') {
            Some(after) => {
                let digits =
                    after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                let Ok(start) = after[..digits].parse::<u32>() else {
                    continue;
                };
                (start, &after[digits..])
            }
            None => (1, rest),
        };
        let Some(rest) = rest.strip_prefix(".json") else {
            continue;
        };
        let part = match rest.strip_prefix('.') {
            None if rest.is_empty() => None,
            Some(n) => match n.parse::<u32>() {
                Ok(n) => Some(n),
                Err(_) => continue,
            },
            None => continue,
        };
        by_start.entry(start).or_default().push((part, name));
    }
    by_start
        .into_values()
        .map(|mut files| {
            files.sort();
            files.into_iter().map(|(_, name)| name.clone()).collect()
        })
        .collect()
}

fn trace_file_arg(file: &Path) -> String {
    format!("{TRACE_FILE}{}", file.display())
}

/// Points a server's `--trace-config triton,file=...` (if it traces to a file) at `file`.
fn retrace(args: &mut [String], file: &Path) {
    for i in 1..args.len() {
        if args[i - 1] == TRACE_CONFIG && args[i].starts_with(TRACE_FILE) {
            args[i] = trace_file_arg(file);
        }
    }
}

/// How long an injected graceful restart may take before the server is killed (Triton waits
/// for requests in flight, by default up to 30 s).
const RESTART_STOP_GRACE: Duration = Duration::from_secs(30);
/// A paused server's guardian resumes it this long after the fault's planned end, should the
/// driver not have done so.
const PAUSE_GUARD_SLACK: Duration = Duration::from_secs(5);

/// The guardian of a paused server: `sh -c GUARDIAN PID TICKS` sends SIGCONT to the process
/// after TICKS tenths of a second, or at once on SIGTERM (the driver's death, through the
/// parent-death signal). Short sleeps, so the trap runs within 0.1 s and no sleep outlives it
/// by more.
const GUARDIAN: &str = "trap 'kill -CONT $0; exit 0' TERM; i=0; \
    while [ $i -lt $1 ]; do sleep 0.1; i=$((i+1)); done; kill -CONT $0";

fn exit_of(member_id: &str, status: ExitStatus) -> MemberExit {
    MemberExit {
        member_id: member_id.into(),
        code: status.code(),
        signal: status.signal(),
        reason: None,
    }
}

/// The local launcher runs binaries; an image is for the kube launcher.
const IMAGES_ARE_KUBE: &str =
    "the local launcher runs binaries; this template names an image (use --launcher kube)";

/// `path` when it is an executable file; else what it is instead.
fn executable(path: PathBuf) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(path),
        Ok(m) if m.is_file() => Err(format!("{} is not executable", path.display())),
        Ok(_) => Err(format!("{} is not a file", path.display())),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn refused(field: FieldPath, why: impl Into<String>) -> Unlaunchable {
    Unlaunchable {
        field,
        why: why.into(),
    }
}

/// What a template starts with on this machine, or which of its fields (below `at`, the
/// template's own path) says something this machine does not have: asked before anything
/// starts ([`Launcher::unlaunchable`]) and again at each start.
impl LocalLauncher {
    /// `t`'s tritonserver: for `auto`, the one installed ([`tritonserver::find_binary`]),
    /// else its path, an executable file.
    fn server_binary(&self, t: &ServerTemplate, at: &FieldPath) -> Result<PathBuf, Unlaunchable> {
        let field = at.key("tritonserver");
        match t.tritonserver.binary() {
            None => Err(refused(field, IMAGES_ARE_KUBE)),
            Some(ARTIFACT_AUTO) => tritonserver::find_binary(Some(&self.matrix_dir))
                .map_err(|e| refused(field.key("binary"), e.to_string())),
            Some(b) => executable(self.resolve(b)).map_err(|why| refused(field.key("binary"), why)),
        }
    }

    /// `t`'s model repositories, each a directory on this machine.
    fn repositories(
        &self,
        t: &ServerTemplate,
        at: &FieldPath,
    ) -> Result<Vec<PathBuf>, Unlaunchable> {
        if let Some(why) = kube_only_models(t) {
            return Err(refused(at.key("model_image"), why));
        }
        let field = at.key("model_repositories");
        (0..)
            .zip(&t.model_repositories)
            .map(|(i, r)| match self.resolve(r) {
                dir if dir.is_dir() => Ok(dir),
                dir => Err(refused(
                    field.index(i),
                    format!("model repository {} is not a directory", dir.display()),
                )),
            })
            .collect()
    }

    /// `t`'s worker: for `auto`, the `worker` built beside this driver, else the one on PATH;
    /// else its path, an executable file.
    fn worker_binary(&self, t: &ClientTemplate, at: &FieldPath) -> Result<PathBuf, Unlaunchable> {
        let field = at.key("worker");
        let found = match t.worker.binary() {
            None => return Err(refused(field, IMAGES_ARE_KUBE)),
            Some(ARTIFACT_AUTO) => std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(|d| d.join("worker")))
                .filter(|p| p.is_file())
                .or_else(|| stress_common::paths::find_on_path("worker"))
                .ok_or_else(|| {
                    "no worker binary beside the driver or on PATH (build it: cargo build \
                     --release -p worker)"
                        .to_string()
                }),
            Some(b) => executable(self.resolve(b)),
        };
        found.map_err(|why| refused(field.key("binary"), why))
    }
}

/// `t`'s foreign client program (its command's first word) as its worker will look for it: a
/// path, an executable file; a bare name, on PATH (unless the template sets PATH itself).
fn client_program(t: &ClientTemplate, at: &FieldPath) -> Result<(), Unlaunchable> {
    let Some(client) = &t.client else {
        return Ok(());
    };
    let program = &client.command.argv()[0];
    let field = at.key("client").key("command").index(0);
    if program.contains('/') {
        return executable(program.into())
            .map(drop)
            .map_err(|why| refused(field, why));
    }
    let sets_path = t.env.contains_key("PATH") || client.env.contains_key("PATH");
    match sets_path || stress_common::paths::find_on_path(program).is_some() {
        true => Ok(()),
        false => Err(refused(field, format!("no program {program:?} on PATH"))),
    }
}

impl LocalLauncher {
    pub fn new(run_dir: &Path, matrix_dir: &Path) -> Self {
        Self {
            run_dir: run_dir.into(),
            matrix_dir: matrix_dir.into(),
            servers: BTreeMap::new(),
            clients: BTreeMap::new(),
            exits: BTreeMap::new(),
            child_ended: None,
            restarting: BTreeMap::new(),
            paused: BTreeMap::new(),
            proxied: BTreeSet::new(),
            proxies: BTreeMap::new(),
            lossy: BTreeMap::new(),
            starts: BTreeMap::new(),
        }
    }

    fn log_path(&self, member: &str) -> PathBuf {
        self.run_dir.join("logs").join(format!("{member}.log"))
    }

    fn resolve(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        if p.is_absolute() {
            p.into()
        } else {
            self.matrix_dir.join(p)
        }
    }

    /// Starts a server again on its address after an injected fault ended it, appending to its
    /// log; what is left of its old process group is killed first.
    async fn start_again(&mut self, name: &str) -> Result<(), LaunchError> {
        let Some(old) = self.servers.remove(name) else {
            return Err(LaunchError::Member {
                member: name.into(),
                reason: "not a started server".into(),
            });
        };
        let mut spec = old.spec.clone();
        spec.append_log = true;
        let start = self.starts.get(name).copied().unwrap_or(1) + 1;
        retrace(
            &mut spec.extra_args,
            &trace_file(&self.run_dir.join("traces"), name, start),
        );
        drop(old);
        let started = TritonServer::start(spec)
            .await
            .map_err(|e| LaunchError::Member {
                member: name.into(),
                reason: format!("not started again after the injected fault: {e}"),
            })?;
        tracing::info!(
            "{name} started again after an injected fault (pid {})",
            started.pid().unwrap_or_default()
        );
        self.servers.insert(name.into(), started);
        self.starts.insert(name.into(), start);
        Ok(())
    }

    /// Resumes every paused server and ends its guardian: before any stop (SIGTERM waits while
    /// a process is stopped).
    fn resume_all(&mut self) {
        for (name, mut guardian) in std::mem::take(&mut self.paused) {
            if let Some(s) = self.servers.get(&name) {
                let _ = s.signal_group(nix::sys::signal::Signal::SIGCONT);
            }
            let _ = guardian.start_kill();
            let _ = guardian.try_wait();
        }
    }

    /// Ends every packet loss still in place (the run ends; the rules must not outlive it).
    async fn end_losses(&mut self) {
        for (_, loss) in std::mem::take(&mut self.lossy) {
            loss.end().await;
        }
    }

    fn record_exit(&mut self, exit: MemberExit) -> Option<MemberExit> {
        if self.exits.contains_key(&exit.member_id) {
            return None;
        }
        self.exits.insert(exit.member_id.clone(), exit.clone());
        Some(exit)
    }
}

/// Why a server template cannot run here because its models come from an image (None: they
/// do not). A process has no init container to copy them; a directory on this machine does it.
fn kube_only_models(t: &ServerTemplate) -> Option<String> {
    let m = t.model_image.as_ref()?;
    Some(format!(
        "model_image ({}) copies models into a pod (kube launcher only); for the local launcher \
         list a directory on this machine under model_repositories instead of {} (the project's \
         QA models are the repository's models/)",
        m.image, m.path
    ))
}

#[async_trait::async_trait]
impl Launcher for LocalLauncher {
    fn name(&self) -> &'static str {
        "local"
    }

    fn span_receiver_host(&self) -> Option<std::net::IpAddr> {
        Some(std::net::Ipv4Addr::LOCALHOST.into())
    }

    fn unlaunchable(&self, plan: &RunPlan) -> Vec<Unlaunchable> {
        let servers: BTreeMap<_, _> = plan
            .servers
            .iter()
            .map(|s| (&s.template_name, &s.template))
            .collect();
        let clients: BTreeMap<_, _> = plan
            .clients
            .iter()
            .map(|c| (&c.template_name, &c.template))
            .collect();
        let server_refusals = servers.into_iter().flat_map(|(name, t)| {
            let at = FieldPath::root().key("server_templates").key(name);
            [
                self.server_binary(t, &at).err(),
                self.repositories(t, &at).err(),
            ]
        });
        let client_refusals = clients.into_iter().flat_map(|(name, t)| {
            let at = FieldPath::root().key("client_templates").key(name);
            [
                self.worker_binary(t, &at).err(),
                client_program(t, &at).err(),
            ]
        });
        server_refusals.chain(client_refusals).flatten().collect()
    }

    async fn read_model_configs(
        &mut self,
        template: &crate::matrix::ServerTemplate,
        models: &[String],
    ) -> Result<super::ModelConfigs, super::ReadConfigsError> {
        let repositories: Vec<PathBuf> = template
            .model_repositories
            .iter()
            .map(|r| self.resolve(r))
            .collect();
        let found = models
            .iter()
            .filter_map(|model| {
                repositories.iter().enumerate().find_map(|(i, repo)| {
                    let text =
                        std::fs::read_to_string(repo.join(model).join("config.pbtxt")).ok()?;
                    Some((model.clone(), (i, text)))
                })
            })
            .collect();
        Ok(super::ModelConfigs {
            found,
            looked_in: repositories
                .iter()
                .map(|r| r.display().to_string())
                .collect(),
        })
    }

    async fn cpu_use(&mut self, member_id: &str) -> Option<super::CpuUse> {
        let pid = self.clients.get(member_id)?.child.id()?;
        process_cpu(pid)
    }

    async fn member_may_have_ended(&mut self) {
        if self.child_ended.is_none() {
            use tokio::signal::unix::{SignalKind, signal};
            match signal(SignalKind::child()) {
                Ok(s) => self.child_ended = Some(s),
                Err(e) => tracing::warn!("exits are seen at each poll only (no SIGCHLD: {e})"),
            }
        }
        match &mut self.child_ended {
            Some(sigchld) => {
                sigchld.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    }

    async fn start_server(&mut self, server: &ServerMember) -> Result<(), LaunchError> {
        let member_err = |reason: String| LaunchError::Member {
            member: server.name.to_string(),
            reason,
        };
        let t = &server.template;
        let at = FieldPath::root();
        let binary = self.server_binary(t, &at).map_err(|e| member_err(e.why))?;
        let repositories = self.repositories(t, &at).map_err(|e| member_err(e.why))?;
        let mut spec = ServerSpec::new(binary, repositories, self.log_path(&server.name));
        spec.extra_args = t.args.clone();
        if let Some(trace) = t.trace.as_ref().filter(|t| t.writes_files()) {
            let dir = self.run_dir.join("traces");
            std::fs::create_dir_all(&dir).map_err(|e| member_err(e.to_string()))?;
            spec.extra_args.extend([
                TRACE_CONFIG.into(),
                trace_file_arg(&trace_file(&dir, &server.name, 1)),
            ]);
            spec.extra_args.extend(trace.args());
        }
        if let Some(trace) = t.trace.as_ref().filter(|t| !t.writes_files()) {
            spec.extra_args.extend(trace.args());
        }
        spec.env = t.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        // Triton stamps its log lines with local time: UTC, so failures find their lines.
        if !t.env.contains_key("TZ") {
            spec.env.push(("TZ".into(), "UTC".into()));
        }
        let started = TritonServer::start(spec)
            .await
            .map_err(|e| member_err(e.to_string()))?;
        self.servers.insert(server.name.to_string(), started);
        self.starts.insert(server.name.to_string(), 1);
        Ok(())
    }

    async fn wait_servers_ready(
        &mut self,
        timeout: Duration,
    ) -> Result<Vec<ServerEndpoint>, LaunchError> {
        let mut endpoints = Vec::new();
        for (name, server) in &mut self.servers {
            server
                .wait_ready(timeout)
                .await
                .map_err(|e| LaunchError::Member {
                    member: name.clone(),
                    reason: e.to_string(),
                })?;
            let (mut grpc, mut http) = (server.grpc_address(), server.http_address());
            // The proxy stays for the whole run: clients keep the address they were given.
            if self.proxied.contains(name) && !self.proxies.contains_key(name) {
                let proxy = |upstream: String| async move {
                    FaultProxy::start(&upstream)
                        .await
                        .map_err(|e| LaunchError::Member {
                            member: name.clone(),
                            reason: format!("no proxy for its network fault: {e}"),
                        })
                };
                let pair = [proxy(grpc.clone()).await?, proxy(http.clone()).await?];
                tracing::info!(
                    "{name}: clients reach it through a proxy for its network fault ({} -> {grpc}, {} -> {http})",
                    pair[0].address(),
                    pair[1].address()
                );
                self.proxies.insert(name.clone(), pair);
            }
            if let Some([g, h]) = self.proxies.get(name) {
                (grpc, http) = (g.address().to_string(), h.address().to_string());
            }
            endpoints.push(ServerEndpoint {
                member: name.clone(),
                grpc,
                http,
                metrics: server.metrics_address(),
            });
        }
        Ok(endpoints)
    }

    async fn start_client(
        &mut self,
        client: &ClientMember,
        assignment: &WorkerAssignment,
    ) -> Result<(), LaunchError> {
        let member_err = |reason: String| LaunchError::Member {
            member: client.name.to_string(),
            reason,
        };
        let binary = self
            .worker_binary(&client.template, &FieldPath::root())
            .map_err(|e| member_err(e.why))?;
        let args = worker_args(client, assignment);
        let log = self.log_path(&client.name);
        std::fs::create_dir_all(log.parent().expect("logs dir"))
            .map_err(|e| member_err(e.to_string()))?;
        let file = std::fs::File::create(&log).map_err(|e| member_err(e.to_string()))?;
        let stdout = file.try_clone().map_err(|e| member_err(e.to_string()))?;
        let mut command = stress_common::shutdown::command_dying_with_parent(&binary);
        command
            .args(&args)
            .envs(client.template.env.iter())
            .env(STORE_URL_ENV, &assignment.store_url)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(file)
            .kill_on_drop(true);
        let child = command
            .spawn()
            .map_err(|e| member_err(format!("starting {}: {e}", binary.display())))?;
        let command = format!(
            "{STORE_URL_ENV}={} {}",
            shell_quote(&stress_common::store::mask_url(&assignment.store_url)),
            std::iter::once(binary.display().to_string())
                .chain(args)
                .map(|a| shell_quote(&a))
                .collect::<Vec<_>>()
                .join(" ")
        );
        self.clients
            .insert(client.name.to_string(), Client { child, command });
        Ok(())
    }

    async fn exited(&mut self) -> Vec<MemberExit> {
        let mut ended = Vec::new();
        let mut again = Vec::new();
        for (name, s) in &mut self.servers {
            if let Some(status) = s.try_wait() {
                if self.restarting.remove(name).is_some() {
                    tracing::info!("{name} ended by the injected restart ({status})");
                    again.push(name.clone());
                } else {
                    ended.push(exit_of(name, status));
                }
            } else if self
                .restarting
                .get(name)
                .is_some_and(|deadline| std::time::Instant::now() >= *deadline)
            {
                tracing::warn!(
                    "{name} did not stop within {RESTART_STOP_GRACE:?} of the injected restart's \
                     SIGTERM: killed"
                );
                s.kill().await;
            }
        }
        for name in again {
            if let Err(e) = self.start_again(&name).await {
                ended.push(MemberExit::because(name, e.to_string()));
            }
        }
        for (name, c) in &mut self.clients {
            if let Ok(Some(status)) = c.child.try_wait() {
                ended.push(exit_of(name, status));
            }
        }
        ended
            .into_iter()
            .filter_map(|e| self.record_exit(e))
            .collect()
    }

    async fn stop_clients(&mut self, grace: Duration) -> Vec<MemberExit> {
        for c in self.clients.values() {
            if let Some(pid) = c.child.id() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
        }
        let deadline = tokio::time::Instant::now() + grace;
        let mut exits = Vec::new();
        for (name, c) in &mut self.clients {
            let status = match tokio::time::timeout_at(deadline, c.child.wait()).await {
                Ok(Ok(s)) => s,
                _ => {
                    let _ = c.child.kill().await;
                    match c.child.wait().await {
                        Ok(s) => s,
                        Err(_) => continue,
                    }
                }
            };
            exits.push(exit_of(name, status));
        }
        for e in &exits {
            self.exits.insert(e.member_id.clone(), e.clone());
        }
        exits
    }

    async fn stop_all(&mut self, grace: Duration) {
        self.resume_all();
        self.end_losses().await;
        // The workers first (SIGTERM: they stop their load and flush their last records),
        // all signalled before any is waited for, on one deadline.
        for pid in self.clients.values().filter_map(|c| c.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = tokio::time::Instant::now() + grace;
        let mut ended = Vec::new();
        for (name, c) in &mut self.clients {
            let status = match tokio::time::timeout_at(deadline, c.child.wait()).await {
                Ok(Ok(s)) => Some(s),
                _ => {
                    tracing::info!("{name} did not stop within {grace:?} of SIGTERM: killed");
                    let _ = c.child.kill().await;
                    c.child.wait().await.ok()
                }
            };
            ended.extend(status.map(|s| exit_of(name, s)));
        }
        // Then the servers, at once: the run has failed and their metrics were read, and a
        // graceful stop unloads every model (seconds with python models) for nothing. `kill`
        // also ends their model processes and removes their shared memory.
        for (name, s) in &mut self.servers {
            let status = match s.try_wait() {
                Some(st) => Some(st),
                None => {
                    s.kill().await;
                    s.wait().await
                }
            };
            ended.extend(status.map(|st| exit_of(name, st)));
        }
        for e in ended {
            self.exits.entry(e.member_id.clone()).or_insert(e);
        }
    }

    /// Stops the servers (after the clients), in parallel.
    async fn stop_servers(&mut self, grace: Duration) {
        self.resume_all();
        self.end_losses().await;
        let stops = self
            .servers
            .iter_mut()
            .map(|(name, s)| async move { (name.clone(), s.stop(grace).await) });
        for (name, status) in futures::future::join_all(stops).await {
            if let Some(status) = status {
                self.exits
                    .entry(name.clone())
                    .or_insert_with(|| exit_of(&name, status));
            }
        }
    }

    fn can_inject(&self, fault: &Fault) -> Result<(), super::Uninjectable> {
        if matches!(
            fault.kind,
            FaultKind::Evict | FaultKind::Drain | FaultKind::StoreRestart | FaultKind::ApiOutage
        ) {
            return Err(super::Uninjectable::Kind(format!(
                "{} is a Kubernetes fault (a pod evicted or deleted, or the API cut off): the \
                 kube launcher injects it, a local run has no pod and no API server",
                fault.kind.as_str()
            )));
        }
        match &fault.network {
            Some(n) if n.loss.is_some() => match super::packet_filter::unavailable() {
                Some(missing) => Err(super::Uninjectable::Setting {
                    field: "network.loss",
                    why: missing,
                }),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    fn plan_faults(&mut self, injections: &[Injection]) {
        self.proxied = injections
            .iter()
            .filter(|i| i.kind == FaultKind::Network)
            .map(|i| i.member.clone())
            .collect();
    }

    async fn inject(&mut self, injection: &Injection) -> Result<super::Injected, LaunchError> {
        let name = injection.member.as_str();
        let member_err = |reason: String| LaunchError::Member {
            member: name.into(),
            reason,
        };
        let Some(server) = self.servers.get_mut(name) else {
            return Err(member_err("not a started server".into()));
        };
        match injection.kind {
            FaultKind::Kill => {
                server.kill().await;
                self.start_again(name)
                    .await
                    .map(|()| super::Injected::default())
            }
            FaultKind::Restart => {
                server
                    .terminate()
                    .map_err(|e| member_err(format!("SIGTERM: {e}")))?;
                self.restarting
                    .insert(name.into(), std::time::Instant::now() + RESTART_STOP_GRACE);
                Ok(super::Injected::default())
            }
            // The server process alone, its python model processes run on: a hung server.
            // Freezing the whole group (as `docker pause` does) crashed tritonserver 2.51's
            // python backend in 2 of 3 tries (boost::interprocess::lock_exception on resume):
            // a finding of its own, not the fault this kind injects.
            FaultKind::Pause => {
                let Some(pid) = server.pid() else {
                    return Err(member_err("the server has ended".into()));
                };
                let ticks = (injection.duration + PAUSE_GUARD_SLACK).as_millis() / 100;
                let guardian = stress_common::shutdown::command_dying_with_parent("sh")
                    .args(["-c", GUARDIAN, &pid.to_string(), &ticks.to_string()])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(|e| member_err(format!("no guardian for the pause: {e}")))?;
                if let Err(e) = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGSTOP,
                ) {
                    let mut guardian = guardian;
                    let _ = guardian.start_kill();
                    return Err(member_err(format!("SIGSTOP: {e}")));
                }
                self.paused.insert(name.into(), guardian);
                Ok(super::Injected::default())
            }
            FaultKind::Network => {
                let Some(proxies) = self.proxies.get(name) else {
                    return Err(member_err(
                        "no proxy between it and its clients (the fault was not planned)".into(),
                    ));
                };
                let network = injection.network.clone().unwrap_or_default();
                let shaping = Shaping {
                    delay: network.delay.unwrap_or_default(),
                    jitter: network.jitter.unwrap_or_default(),
                };
                if let Some(loss) = network.loss {
                    let ports = proxies
                        .iter()
                        .filter_map(|p| p.address().rsplit_once(':')?.1.parse().ok())
                        .collect();
                    let run = self
                        .run_dir
                        .file_name()
                        .unwrap_or_default()
                        .to_string_lossy();
                    let rules = LossRules::new(ports, loss, &format!("triton-stress {run} {name}"));
                    let lossy = PacketLoss::start(rules, injection.duration)
                        .await
                        .map_err(|e| member_err(e.to_string()))?;
                    self.lossy.insert(name.into(), lossy);
                }
                if shaping != Shaping::default() {
                    for p in proxies {
                        p.shape(Some(shaping));
                    }
                }
                Ok(super::Injected::default())
            }
            FaultKind::Evict
            | FaultKind::Drain
            | FaultKind::StoreRestart
            | FaultKind::ApiOutage => Err(member_err(format!(
                "{} is a Kubernetes fault: no pod here",
                injection.kind.as_str()
            ))),
        }
    }

    async fn end_fault(&mut self, member: &str) -> Result<FaultEnded, LaunchError> {
        for p in self.proxies.get(member).into_iter().flatten() {
            p.shape(None);
        }
        let mut ended = FaultEnded::default();
        if let Some(loss) = self.lossy.remove(member) {
            ended.dropped_packets = loss.end().await;
        }
        let Some(mut guardian) = self.paused.remove(member) else {
            return Ok(ended);
        };
        let resumed = match self.servers.get(member) {
            Some(s) => s.signal_group(nix::sys::signal::Signal::SIGCONT),
            None => Ok(()),
        };
        let _ = guardian.start_kill();
        let _ = guardian.wait().await;
        resumed.map(|()| ended).map_err(|e| LaunchError::Member {
            member: member.into(),
            reason: format!("SIGCONT: {e}"),
        })
    }

    async fn diagnostics(&mut self, member_id: &str) -> MemberDiagnostics {
        let log = self.log_path(member_id);
        MemberDiagnostics {
            launcher: self.name().into(),
            exit: self.exits.get(member_id).map(MemberEnd::from),
            command: self.command_line(member_id),
            location: self.locate(member_id),
            log_tail: tail_lines(&log, LOG_TAIL_LINES)
                .lines()
                .map(String::from)
                .collect(),
            log_file: Some(log.display().to_string()),
            ..Default::default()
        }
    }

    async fn server_live(
        &mut self,
        member_id: &str,
        timeout: Duration,
    ) -> Result<(), tritonserver::ProbeError> {
        let s = self
            .servers
            .get(member_id)
            .ok_or_else(|| tritonserver::ProbeError::NoAddress {
                member: member_id.into(),
            })?;
        tritonserver::probe_live(&s.http_address(), timeout).await
    }

    async fn server_metrics(&mut self, member_id: &str) -> Option<String> {
        let s = self.servers.get(member_id)?;
        tritonserver::metrics_text(&s.metrics_address()).await
    }

    async fn server_log_between(
        &mut self,
        member_id: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Vec<String> {
        /// A log bigger than this (a verbose server) is not read whole for an excerpt.
        const MAX_LOG_BYTES: u64 = 256 * 1024 * 1024;
        let path = self.log_path(member_id);
        if std::fs::metadata(&path).map_or(true, |m| m.len() > MAX_LOG_BYTES) {
            return Vec::new();
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Vec::new();
        };
        let year = jiff::Timestamp::from_millisecond(from_ms)
            .map(|t| t.to_zoned(jiff::tz::TimeZone::UTC).year())
            .unwrap_or(1970);
        super::logs::between(text.lines(), from_ms, to_ms, |l| {
            Some((super::logs::triton_line_ms(l, year)?, l))
        })
    }

    fn server_memory(&self, member_id: &str) -> Option<super::ServerMemory> {
        self.servers
            .get(member_id)
            .and_then(TritonServer::pid)
            .map(super::ServerMemory::ProcessTree)
    }

    fn locate(&self, member_id: &str) -> Option<String> {
        self.servers
            .get(member_id)
            .and_then(TritonServer::pid)
            .or_else(|| self.clients.get(member_id).and_then(|c| c.child.id()))
            .map(|pid| format!("pid {pid}"))
    }

    fn command_line(&self, member_id: &str) -> Option<String> {
        if let Some(s) = self.servers.get(member_id) {
            return Some(s.spec.command_line());
        }
        self.clients.get(member_id).map(|c| c.command.clone())
    }
}

/// The resident memory of a process and all its descendants (a tritonserver and its python
/// backend stubs, where a model's leak shows), from /proc; None when the process is gone.
pub fn process_tree_rss_bytes(root: u32) -> Option<u64> {
    let read = |pid: u32| -> Option<Process> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| -> Option<u64> {
            let line = status.lines().find(|l| l.starts_with(name))?;
            line.split_whitespace().nth(1)?.parse().ok()
        };
        Some(Process {
            pid,
            parent: field("PPid:")? as u32,
            // Kernel threads and zombies have no VmRSS.
            rss_kb: field("VmRSS:").unwrap_or(0),
        })
    };
    read(root)?;
    let table: Vec<Process> = std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(read)
        .collect();
    tree_rss_kb(root, &table).map(|kb| kb * 1024)
}

#[derive(Debug, Clone, Copy)]
struct Process {
    pid: u32,
    parent: u32,
    rss_kb: u64,
}

/// The resident set of `root` and every process below it in `table` (None: `root` is not in it).
fn tree_rss_kb(root: u32, table: &[Process]) -> Option<u64> {
    let parents: BTreeMap<u32, u32> = table.iter().map(|p| (p.pid, p.parent)).collect();
    table.iter().find(|p| p.pid == root)?;
    let below_root = |pid: u32| {
        let mut at = pid;
        // Bounded: a chain is never longer than the table.
        for _ in 0..=table.len() {
            if at == root {
                return true;
            }
            match parents.get(&at) {
                Some(&up) if up != at => at = up,
                _ => return false,
            }
        }
        false
    };
    Some(
        table
            .iter()
            .filter(|p| below_root(p.pid))
            .map(|p| p.rss_kb)
            .sum(),
    )
}

/// A sweep variant's model repositories under `dir`: each of the group's repositories as links to
/// its models, but a swept model's (`swept`: model → index of its repository) directory holds links to its files and the variant's own
/// config.pbtxt (the model's files are not copied).
pub fn variant_repositories(
    dir: &std::path::Path,
    repositories: &[std::path::PathBuf],
    swept: &std::collections::BTreeMap<String, usize>,
    configs: &std::collections::BTreeMap<String, String>,
) -> std::io::Result<Vec<String>> {
    let mut out = Vec::with_capacity(repositories.len());
    for (i, repo) in repositories.iter().enumerate() {
        let target = dir.join(format!("models-{i}"));
        std::fs::create_dir_all(&target)?;
        let target = std::fs::canonicalize(&target)?;
        let repo = std::fs::canonicalize(repo)?;
        for entry in std::fs::read_dir(&repo)? {
            let entry = entry?;
            let name = entry.file_name();
            let model = name.to_string_lossy().to_string();
            match swept.get(&model).filter(|r| **r == i) {
                Some(_) => {
                    let model_dir = target.join(&name);
                    std::fs::create_dir_all(&model_dir)?;
                    for file in std::fs::read_dir(entry.path())? {
                        let file = file?;
                        if file.file_name() != "config.pbtxt" {
                            link(&file.path(), &model_dir.join(file.file_name()))?;
                        }
                    }
                    std::fs::write(model_dir.join("config.pbtxt"), &configs[&model])?;
                }
                None => link(&entry.path(), &target.join(&name))?,
            }
        }
        out.push(target.display().to_string());
    }
    Ok(out)
}

fn link(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    match std::fs::remove_file(to) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::os::unix::fs::symlink(from, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_worker_binary_must_be_an_executable_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        std::fs::write(dir.join("worker"), "").unwrap();
        let launcher = LocalLauncher::new(dir, dir);
        let template = |binary: &str| {
            let mut t: ClientTemplate = serde_json::from_value(
                serde_json::json!({"worker": {"binary": "auto"}, "protocol": "grpc"}),
            )
            .unwrap();
            t.worker = crate::matrix::Artifact::Binary(binary.into());
            t
        };
        let at = FieldPath::root().key("client_templates").key("c");
        let refusal = |binary: &str| launcher.worker_binary(&template(binary), &at).unwrap_err();
        let not_executable = refusal("worker");
        assert_eq!(
            not_executable.field.to_string(),
            "client_templates.c.worker.binary"
        );
        assert_eq!(
            not_executable.why,
            format!("{}/worker is not executable", dir.display())
        );
        std::fs::set_permissions(dir.join("worker"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        assert_eq!(
            launcher.worker_binary(&template("worker"), &at),
            Ok(dir.join("worker"))
        );
        assert!(
            refusal("bin/worker")
                .why
                .starts_with(&format!("{}/bin/worker: ", dir.display()))
        );
        assert!(
            refusal("/no/such/worker")
                .why
                .starts_with("/no/such/worker: ")
        );
    }

    #[test]
    fn each_start_of_a_server_traces_to_its_own_files_found_again_per_process() {
        let dir = Path::new("/run/traces");
        let mut args: Vec<String> = vec![
            "--log-verbose=0".into(),
            TRACE_CONFIG.into(),
            trace_file_arg(&trace_file(dir, "triton-0", 1)),
            TRACE_CONFIG.into(),
            "level=TIMESTAMPS".into(),
        ];
        assert_eq!(args[2], "triton,file=/run/traces/triton-0.json");
        retrace(&mut args, &trace_file(dir, "triton-0", 2));
        assert_eq!(args[2], "triton,file=/run/traces/triton-0@2.json");
        assert_eq!(args[4], "level=TIMESTAMPS", "other trace settings stay");
        let names: Vec<String> = [
            "triton-0@2.json",
            "triton-0.json.10",
            "triton-0.json.2",
            "triton-0@10.json",
            "triton-0.json",
            "triton-10.json",
            "triton-0.json.x",
            "triton-0@x.json",
            "triton-0@2.json.1",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            trace_files_by_start(&names, "triton-0"),
            [
                vec!["triton-0.json", "triton-0.json.2", "triton-0.json.10"],
                vec!["triton-0@2.json", "triton-0@2.json.1"],
                vec!["triton-0@10.json"],
            ]
        );
        assert_eq!(
            trace_files_by_start(&names, "triton-1"),
            Vec::<Vec<String>>::new()
        );
    }

    #[test]
    fn a_process_tree_counts_its_descendants_only() {
        let p = |pid, parent, rss_kb| Process {
            pid,
            parent,
            rss_kb,
        };
        // 10 is the server; 11 and 12 its stubs, 13 a stub's child; 20 and 1 are not its own.
        let table = [
            p(1, 0, 5),
            p(10, 1, 100),
            p(11, 10, 40),
            p(12, 10, 40),
            p(13, 11, 2),
            p(20, 1, 1000),
        ];
        assert_eq!(tree_rss_kb(10, &table), Some(182));
        assert_eq!(tree_rss_kb(11, &table), Some(42));
        assert_eq!(tree_rss_kb(99, &table), None);
        // A loop in the table (pid reuse while reading) ends.
        assert_eq!(tree_rss_kb(30, &[p(30, 31, 1), p(31, 30, 1)]), Some(2));
        // The real /proc: this process has a resident set, a missing one is None.
        assert!(process_tree_rss_bytes(std::process::id()).unwrap() > 0);
        assert_eq!(process_tree_rss_bytes(u32::MAX), None);
    }

    #[test]
    fn a_model_image_is_refused_with_what_to_do_instead() {
        let m = crate::matrix::parse(
            r#"
version: 1
run: { name: local, duration: 1m }
server_templates:
  plain: { tritonserver: { binary: auto }, model_repositories: [models] }
  imaged:
    tritonserver: { binary: auto }
    model_repositories: [/qa]
    model_image: { image: "triton-stress/models:dev", path: /qa }
server_groups:
  a: { template: plain, instances: 1 }
  b: { template: imaged, instances: 1 }
client_templates:
  c: { worker: { binary: auto }, protocol: grpc }
client_groups:
  d: { template: c, instances: 1, target: a }
"#,
            "local.yaml",
        )
        .unwrap();
        assert_eq!(kube_only_models(&m.server_templates["plain"]), None);
        let reason = kube_only_models(&m.server_templates["imaged"]).unwrap();
        assert!(
            reason.contains("kube launcher only")
                && reason.contains("triton-stress/models:dev")
                && reason.contains("models/"),
            "{reason}"
        );
    }
}

/// A member's CPU use so far: its process's state, and the threads' schedstat of it and of
/// every process below it (a foreign client's program is the worker's child).
fn process_cpu(pid: u32) -> Option<super::CpuUse> {
    let mut lines = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    for p in std::iter::once(pid).chain(descendants(pid)) {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            // A thread that ended between the listing and the read used what it used before.
            if let Ok(line) = std::fs::read_to_string(task.path().join("schedstat")) {
                lines.push_str(&line);
            }
        }
    }
    super::CpuUse::from_proc(&lines)
}

/// The processes below `pid` (children, theirs, ...), from every process's parent in /proc.
fn descendants(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            Some((p, super::stat_state_and_parent(&stat)?.1))
        })
        .collect();
    let mut found = vec![pid];
    let mut i = 0;
    while let Some(&parent) = found.get(i) {
        found.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    found.split_off(1)
}

#[cfg(test)]
mod cpu_tests {
    use super::*;
    use nix::sys::signal::Signal;

    fn signal(pid: u32, signal: Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
    }

    /// `pid`'s readings `look_ms` apart, after `settle_ms` for it to start.
    fn readings(
        pid: u32,
        settle_ms: u64,
        look_ms: u64,
    ) -> (crate::launcher::CpuUse, crate::launcher::CpuUse) {
        std::thread::sleep(Duration::from_millis(settle_ms));
        let before = process_cpu(pid).unwrap();
        std::thread::sleep(Duration::from_millis(look_ms));
        (before, process_cpu(pid).unwrap())
    }

    /// A process that wakes every 20 ms for a moment (a worker under light load) uses well
    /// under one 10 ms clock tick per half second: it must read as busy all the same.
    #[test]
    fn a_lightly_loaded_process_reads_busy_and_a_stopped_one_reads_stopped() {
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import time\nwhile True:\n    t = time.perf_counter()\n    \
                 while time.perf_counter() - t < 0.0003: pass\n    time.sleep(0.02)",
            ])
            .spawn()
            .unwrap();
        let pid = child.id();
        let (before, after) = readings(pid, 300, 500);
        let used = after.used - before.used;
        assert!(
            used >= Duration::from_millis(3) && !after.stopped,
            "{before:?} -> {after:?}"
        );
        signal(pid, Signal::SIGSTOP);
        std::thread::sleep(Duration::from_millis(50));
        let stopped = process_cpu(pid).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(process_cpu(pid).unwrap(), stopped);
        assert!(stopped.stopped, "{stopped:?}");
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(process_cpu(u32::MAX), None);
    }

    /// A supervisor that only waits while its child works (a foreign client under the worker)
    /// is busy: the child's CPU counts.
    #[test]
    fn the_cpu_of_a_process_s_children_counts() {
        let mut parent = std::process::Command::new("sh")
            .args(["-c", "sh -c 'while :; do :; done' & wait"])
            .spawn()
            .unwrap();
        let pid = parent.id();
        let (before, after) = readings(pid, 200, 300);
        let children = descendants(pid);
        for &child in &children {
            signal(child, Signal::SIGKILL);
        }
        parent.kill().unwrap();
        parent.wait().unwrap();
        assert_eq!(children.len(), 1, "{children:?}");
        assert!(
            after.used - before.used >= Duration::from_millis(100),
            "{before:?} -> {after:?}"
        );
    }
}
