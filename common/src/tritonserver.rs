//! A real tritonserver as a local process: how the local launcher runs servers, and how tests get
//! one. Ports are chosen free on 127.0.0.1 unless given; stdout and stderr go to a log file.

use crate::http::{self, HttpError};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum TritonError {
    #[error(
        "no tritonserver binary: set TRITONSERVER_BIN, or run scripts/install-tritonserver.sh (it installs .local/bin/tritonserver)"
    )]
    NotInstalled,
    #[error("starting {binary}: {source}")]
    Spawn {
        binary: String,
        source: std::io::Error,
    },
    #[error("tritonserver on {address} exited before it was ready ({status}); log: {log}")]
    ExitedEarly {
        address: String,
        status: String,
        log: String,
    },
    #[error(
        "tritonserver on {address} was not ready after {timeout:?}{}; log: {log}",
        loading_words(.loading)
    )]
    NotReady {
        address: String,
        timeout: Duration,
        /// The models its log shows loading and neither loaded nor failed yet (`NAME:VERSION`).
        loading: Vec<String>,
        log: String,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// How to start one server.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    pub binary: PathBuf,
    pub model_repositories: Vec<PathBuf>,
    /// Address to bind (a 127.x address keeps each server on its own loopback address).
    pub host: String,
    /// 0 picks a free port.
    pub http_port: u16,
    pub grpc_port: u16,
    pub metrics_port: u16,
    pub extra_args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub log_file: PathBuf,
    /// Append to `log_file` instead of starting it afresh (a server started again after an
    /// injected fault keeps the log of its first life).
    pub append_log: bool,
}

impl ServerSpec {
    pub fn new(binary: PathBuf, model_repositories: Vec<PathBuf>, log_file: PathBuf) -> Self {
        Self {
            binary,
            model_repositories,
            host: "127.0.0.1".into(),
            http_port: 0,
            grpc_port: 0,
            metrics_port: 0,
            extra_args: Vec::new(),
            env: Vec::new(),
            log_file,
            append_log: false,
        }
    }

    /// The full command line (ports must be resolved first).
    pub fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = self
            .model_repositories
            .iter()
            .map(|r| format!("--model-repository={}", r.display()))
            .collect();
        args.extend([
            format!("--http-address={}", self.host),
            format!("--http-port={}", self.http_port),
            format!("--grpc-address={}", self.host),
            format!("--grpc-port={}", self.grpc_port),
            format!("--metrics-address={}", self.host),
            format!("--metrics-port={}", self.metrics_port),
            "--allow-gpu-metrics=false".into(),
            "--allow-cpu-metrics=true".into(),
            "--pinned-memory-pool-byte-size=0".into(),
            "--exit-timeout-secs=5".into(),
        ]);
        args.extend(self.extra_args.iter().cloned());
        args
    }

    /// A shell line that reproduces this server by hand.
    pub fn command_line(&self) -> String {
        std::iter::once(self.binary.display().to_string())
            .chain(self.args())
            .map(|a| shell_quote(&a))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=./:,@%+".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A free TCP port on 127.0.0.1 for a server to listen on: free when asked, never handed out
/// twice by this process, and below the kernel's ephemeral range, so neither another server
/// started meanwhile nor an outgoing connection (whose local port comes from that range) takes
/// it before the server binds it (seconds later, once its models load). Falls back to a port
/// the kernel picks when none below the range is free.
pub fn free_port() -> std::io::Result<u16> {
    use std::sync::Mutex;
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral_low.max(10_001));
    let span = u32::from(high - low);
    // A different start per process and call (no RNG needed: time and pid mix enough).
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id().wrapping_mul(2_654_435_761);
    for attempt in 0..200u32 {
        let port = low + ((seed.wrapping_add(attempt.wrapping_mul(7919))) % span) as u16;
        if given.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return Ok(port);
        }
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    given.push(port);
    Ok(port)
}

/// How a server failed a probe of one of its endpoints (`/v2/health/live`, gRPC `ServerLive`,
/// `/metrics`, …): each variant a kind a rule or a report can tell apart by [`ProbeError::label`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// It answered, but not yes: an HTTP status other than 200, `live: false`, a gRPC status.
    #[error("{endpoint} answered {answer}")]
    Refused { endpoint: String, answer: String },
    /// Nothing within the timeout: a hung server accepts the connection and never answers.
    #[error("{endpoint} did not answer within {timeout:?} (hung?)")]
    TimedOut { endpoint: String, timeout: Duration },
    /// No connection, or it broke before an answer (refused, reset, no route).
    #[error("{endpoint} did not answer: {cause}")]
    Unreachable { endpoint: String, cause: String },
    /// The address cannot be dialled at all.
    #[error("{endpoint}: not an address: {cause}")]
    BadAddress { endpoint: String, cause: String },
    /// The prober knows no such server (or no address of it to probe).
    #[error("no address to probe for {member}")]
    NoAddress { member: String },
}

impl ProbeError {
    /// A stable name of the kind, for metrics, events and tests.
    pub fn label(&self) -> &'static str {
        match self {
            ProbeError::Refused { .. } => "refused",
            ProbeError::TimedOut { .. } => "timed_out",
            ProbeError::Unreachable { .. } => "unreachable",
            ProbeError::BadAddress { .. } => "bad_address",
            ProbeError::NoAddress { .. } => "no_address",
        }
    }

    /// The error of an HTTP GET of `endpoint` that got no 200 within `timeout`.
    pub fn of_http(
        endpoint: String,
        result: Result<http::Response, HttpError>,
        timeout: Duration,
    ) -> Result<(), ProbeError> {
        match result {
            Ok(r) if r.is_ok() => Ok(()),
            Ok(r) => Err(ProbeError::Refused {
                endpoint,
                answer: r.status.to_string(),
            }),
            Err(HttpError::TimedOut { .. }) => Err(ProbeError::TimedOut { endpoint, timeout }),
            Err(HttpError::Failed { cause, .. }) => {
                Err(ProbeError::Unreachable { endpoint, cause })
            }
        }
    }
}

/// Whether a server answers `GET /v2/health/live` at `http_address` within `timeout`; the error
/// says how it did not (a hung server accepts the connection and never answers).
pub async fn probe_live(http_address: &str, timeout: Duration) -> Result<(), ProbeError> {
    let url = format!("http://{http_address}/v2/health/live");
    ProbeError::of_http(
        format!("{http_address}/v2/health/live"),
        http::get(&url, timeout).await,
        timeout,
    )
}

/// Triton's `/metrics` text at `metrics_address`, if it answers 200 within 5 s.
pub async fn metrics_text(metrics_address: &str) -> Option<String> {
    let url = format!("http://{metrics_address}/metrics");
    let r = http::get(&url, Duration::from_secs(5)).await.ok()?;
    r.is_ok().then_some(r.body)
}

/// TRITONSERVER_BIN, else `.local/bin/tritonserver` in this checkout (found from the given start
/// directory, the current directory or the running program's upwards), else `tritonserver` on
/// PATH.
pub fn find_binary(start: Option<&Path>) -> Result<PathBuf, TritonError> {
    find_tool("tritonserver", "TRITONSERVER_BIN", start).ok_or(TritonError::NotInstalled)
}

/// A tool the install script puts in `.local/bin`: `$ENV_VAR` if set, else `.local/bin/NAME` in
/// an ancestor of `start`, of the current directory or of the running program (the checkout's
/// `target/release/driver` run on a matrix kept elsewhere), else NAME on PATH.
pub fn find_tool(name: &str, env_var: &str, start: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env_var) {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(s) = start {
        dirs.push(s.to_path_buf());
    }
    if let Ok(cwd) = std::env::current_dir() {
        dirs.push(cwd);
    }
    if let Some(program_dir) = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.to_path_buf()))
    {
        dirs.push(program_dir);
    }
    for dir in dirs {
        for d in dir.ancestors() {
            let candidate = d.join(".local/bin").join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    crate::paths::find_on_path(name)
}

/// The last `n` lines of a file (what a report shows of a log).
pub fn tail_lines(path: &Path, n: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    last_lines(&String::from_utf8_lossy(&text), n)
}

/// The last `n` lines of `text`.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The models a tritonserver log shows loading (`"loading: NAME:VERSION"`) and then neither
/// loaded (`"successfully loaded 'NAME'"`) nor failed (`"failed to load 'NAME'"`): what a
/// server that is not ready yet still waits for.
pub fn still_loading(log: &str) -> Vec<String> {
    let mut loading: Vec<String> = Vec::new();
    for line in log.lines() {
        if let Some((_, model)) = line.split_once("\"loading: ") {
            loading.push(model.trim_end_matches('"').to_string());
        } else if let Some((_, rest)) = line
            .split_once("\"successfully loaded '")
            .or_else(|| line.split_once("\"failed to load '"))
        {
            let name = rest.split('\'').next().unwrap_or_default();
            loading.retain(|m| m.rsplit_once(':').map_or(m.as_str(), |(n, _)| n) != name);
        }
    }
    loading
}

fn loading_words(loading: &[String]) -> String {
    match loading.is_empty() {
        true => String::new(),
        false => format!(" (models still loading: {})", loading.join(", ")),
    }
}

/// Whether the tritonserver log at `log` ends in its python backend's intermittent abort
/// (`terminate called after throwing an instance of 'boost::interprocess::lock_exception'`,
/// upstream triton-inference-server/server#8882), seen at start-up on a loaded machine.
pub fn aborted_on_python_backend_lock(log: &Path) -> bool {
    tail_lines(log, 5).contains("boost::interprocess::lock_exception")
}

/// A started tritonserver process.
pub struct TritonServer {
    child: tokio::process::Child,
    /// The process group (= the server's first pid), kept after the child is reaped.
    pgid: u32,
    group_gone: bool,
    pub spec: ServerSpec,
}

impl Drop for TritonServer {
    fn drop(&mut self) {
        // kill_on_drop ends the server only; its model processes would be orphaned.
        self.reap_stubs();
    }
}

impl TritonServer {
    /// Starts the server (free ports are picked for 0s); does not wait for readiness.
    pub async fn start(mut spec: ServerSpec) -> Result<Self, TritonError> {
        for port in [
            &mut spec.http_port,
            &mut spec.grpc_port,
            &mut spec.metrics_port,
        ] {
            if *port == 0 {
                *port = free_port()?;
            }
        }
        if let Some(dir) = spec.log_file.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let log = if spec.append_log {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&spec.log_file)?
        } else {
            std::fs::File::create(&spec.log_file)?
        };
        let mut command = crate::shutdown::command_dying_with_parent(&spec.binary);
        command
            .args(spec.args())
            .envs(spec.env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: the python backend's stub processes are in it too, so
            // killing the group leaves no orphaned model process behind a crashed server.
            .process_group(0)
            .kill_on_drop(true);
        let child = command.spawn().map_err(|source| TritonError::Spawn {
            binary: spec.binary.display().to_string(),
            source,
        })?;
        let pgid = child.id().unwrap_or(0);
        Ok(Self {
            child,
            pgid,
            group_gone: false,
            spec,
        })
    }

    pub fn http_address(&self) -> String {
        format!("{}:{}", self.spec.host, self.spec.http_port)
    }

    pub fn grpc_address(&self) -> String {
        format!("{}:{}", self.spec.host, self.spec.grpc_port)
    }

    pub fn metrics_address(&self) -> String {
        format!("{}:{}", self.spec.host, self.spec.metrics_port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Non-blocking: the exit status if the process has ended.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// [`Self::start`], then [`Self::wait_ready`]; a server that aborted at start-up on its
    /// python backend's lock ([`aborted_on_python_backend_lock`]) is started again, up to three
    /// starts in all, with a line on stderr. For the project's tests, which must not fail on
    /// Triton's bug; a run's launcher reports such an abort as the server's failure instead.
    pub async fn start_ready(spec: ServerSpec, timeout: Duration) -> Result<Self, TritonError> {
        let mut starts = 1;
        loop {
            let mut server = Self::start(spec.clone()).await?;
            match server.wait_ready(timeout).await {
                Ok(()) => return Ok(server),
                Err(e) if starts < 3 && aborted_on_python_backend_lock(&spec.log_file) => {
                    eprintln!(
                        "tritonserver aborted at start-up ({e}) on its python backend's lock \
                         (upstream triton-inference-server/server#8882); starting it again"
                    );
                    starts += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits until `GET /v2/health/ready` answers 200.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<(), TritonError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait() {
                return Err(TritonError::ExitedEarly {
                    address: self.http_address(),
                    status: status.to_string(),
                    log: tail_lines(&self.spec.log_file, 20),
                });
            }
            if http_status(&self.http_address(), "/v2/health/ready").await == Some(200) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let log = std::fs::read(&self.spec.log_file).unwrap_or_default();
                let log = String::from_utf8_lossy(&log);
                return Err(TritonError::NotReady {
                    address: self.http_address(),
                    timeout,
                    loading: still_loading(&log),
                    log: last_lines(&log, 20),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Sends `signal` to the server and its model processes (SIGSTOP freezes them all,
    /// SIGCONT thaws them).
    pub fn signal_group(&self, signal: nix::sys::signal::Signal) -> std::io::Result<()> {
        if self.pgid == 0 || self.group_gone {
            return Err(std::io::Error::other("the server's process group is gone"));
        }
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.pgid as i32), signal)
            .map_err(std::io::Error::from)
    }

    /// SIGTERM to the server alone (a graceful stop); returns at once.
    pub fn terminate(&self) -> std::io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| std::io::Error::other("the server has ended"))?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .map_err(std::io::Error::from)
    }

    /// SIGKILL to the server and its model processes (tests use it to make a server "crash").
    pub async fn kill(&mut self) {
        self.reap_stubs();
        let _ = self.child.kill().await;
    }

    /// SIGTERM, then SIGKILL after `grace`. Returns the exit status.
    pub async fn stop(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        if let Some(status) = self.try_wait() {
            return Some(status);
        }
        if let Some(pid) = self.pid() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let status = match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(r) => r.ok(),
            Err(_) => {
                self.reap_stubs();
                let _ = self.child.kill().await;
                self.child.wait().await.ok()
            }
        };
        self.reap_stubs();
        status
    }

    /// SIGKILLs whatever is left of the server's process group. After the server itself has
    /// ended (killed, or crashed) its python model processes live on, each holding a shared
    /// memory region in /dev/shm that only a clean shutdown removes: their names are read from
    /// the processes' command lines first, and unlinked after the kill.
    pub fn reap_stubs(&mut self) {
        // pgid 0 would mean our own group; once the group is empty its id may be reused.
        if self.pgid == 0 || self.group_gone {
            return;
        }
        let regions = group_shm_regions(self.pgid);
        let r = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.pgid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        if r == Err(nix::errno::Errno::ESRCH) {
            self.group_gone = true;
        }
        for region in regions {
            let _ = std::fs::remove_file(Path::new("/dev/shm").join(region));
        }
    }

    /// Waits for the server to end, then kills what is left of its process group.
    pub async fn wait(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.wait().await.ok();
        self.reap_stubs();
        status
    }
}

/// The prefix of the python backend's shared-memory region names (one per model instance).
const SHM_REGION_PREFIX: &str = "triton_python_backend_shm_region_";

/// Shared-memory regions named on the command lines of a process group's members.
fn group_shm_regions(pgid: u32) -> Vec<String> {
    let Ok(proc_dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut regions = Vec::new();
    for entry in proc_dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ...": comm may contain spaces, so split after its ')'.
        let pgrp = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(2))
            .and_then(|v| v.parse::<u32>().ok());
        if pgrp != Some(pgid) {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            regions.extend(
                cmdline
                    .split(|b| *b == 0)
                    .filter_map(|a| std::str::from_utf8(a).ok())
                    .filter(|a| a.starts_with(SHM_REGION_PREFIX) && !a.contains('/'))
                    .map(str::to_string),
            );
        }
    }
    regions
}

/// The HTTP status of `GET path` at `address` (None when nothing answers within 2 s).
pub async fn http_status(address: &str, path: &str) -> Option<u16> {
    let url = format!("http://{address}{path}");
    http::get(&url, Duration::from_secs(2))
        .await
        .ok()
        .map(|r| r.status)
}

#[cfg(test)]
mod tests {
    /// A model's load that began and neither ended nor failed is still loading; a version's
    /// number does not hide its name's end.
    #[test]
    fn a_log_says_which_models_are_still_loading() {
        let log = r#"I1207 15:46:32.412425 30932 model_lifecycle.cc:472] "loading: opt_in:1"
I1207 15:46:32.412486 30932 model_lifecycle.cc:472] "loading: slow:3"
I1207 15:46:32.412500 30932 model_lifecycle.cc:472] "loading: add_sub:1"
I1207 15:46:32.412500 30932 model_lifecycle.cc:472] "loading: broken:1"
I1207 15:46:34.233917 30932 model_lifecycle.cc:839] "successfully loaded 'opt_in'"
E1207 15:46:34.233917 30932 model_lifecycle.cc:642] "failed to load 'broken' version 1: Internal: boom"
I1207 15:46:34.242555 30932 model_lifecycle.cc:839] "successfully loaded 'add_sub'""#;
        assert_eq!(super::still_loading(log), ["slow:3"]);
        assert!(super::still_loading("").is_empty());
    }

    use super::*;

    #[test]
    fn free_ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        for p in &ports {
            assert!(*p >= 10_000, "{p}");
            std::net::TcpListener::bind(("127.0.0.1", *p)).unwrap();
        }
    }

    #[test]
    fn command_lines_quote_what_needs_it() {
        assert_eq!(shell_quote("--grpc-port=8001"), "--grpc-port=8001");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }

    /// A stand-in for tritonserver (the real abort cannot be had on demand): it dies with
    /// `last_words` on the first `aborts` starts (counted in `dir`), then answers ready on its
    /// `--http-port`.
    fn stand_in(dir: &Path, aborts: u32, last_words: &str) -> ServerSpec {
        let script = dir.join("tritonserver");
        let starts = dir.join("starts");
        let text = format!(
            "#!/bin/sh\necho x >> {starts}\nif [ $(wc -l < {starts}) -le {aborts} ]; then echo \"{last_words}\"; exit 134; fi\n\
             port=$(printf '%s\\n' \"$@\" | sed -n 's/^--http-port=//p')\n\
             exec python3 -c \"import http.server as h; h.HTTPServer(('127.0.0.1', $port), type('R', (h.BaseHTTPRequestHandler,), {{'do_GET': lambda s: (s.send_response(200), s.end_headers())}})).serve_forever()\"\n",
            starts = starts.display()
        );
        std::fs::write(&script, text).unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        ServerSpec::new(script, Vec::new(), dir.join("log"))
    }

    #[tokio::test]
    async fn a_server_aborted_on_its_python_backend_lock_is_started_again_and_no_other() {
        let lock =
            "terminate called after throwing an instance of 'boost::interprocess::lock_exception'";
        let starts = |dir: &Path| {
            std::fs::read_to_string(dir.join("starts"))
                .unwrap()
                .lines()
                .count()
        };
        let ready = Duration::from_secs(20);

        let twice = tempfile::tempdir().unwrap();
        let mut server = TritonServer::start_ready(stand_in(twice.path(), 2, lock), ready)
            .await
            .expect("ready at the third start");
        assert_eq!(starts(twice.path()), 3);
        server.stop(Duration::from_secs(5)).await;

        let thrice = tempfile::tempdir().unwrap();
        let e = TritonServer::start_ready(stand_in(thrice.path(), 3, lock), ready)
            .await
            .err()
            .expect("three starts at most");
        assert!(e.to_string().contains("lock_exception"), "{e}");
        assert_eq!(starts(thrice.path()), 3);

        let other = tempfile::tempdir().unwrap();
        let e = TritonServer::start_ready(stand_in(other.path(), 1, "Segmentation fault"), ready)
            .await
            .err()
            .expect("another abort is the server's failure");
        assert!(e.to_string().contains("Segmentation fault"), "{e}");
        assert_eq!(starts(other.path()), 1);
    }

    #[tokio::test]
    async fn a_liveness_probe_tells_a_hung_server_from_a_dead_one() {
        // Bound and never accepting: the kernel completes connections, nothing ever answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let hung = listener.local_addr().unwrap().to_string();
        let why = probe_live(&hung, Duration::from_millis(200))
            .await
            .unwrap_err();
        assert_eq!(why.label(), "timed_out");
        assert_eq!(
            why.to_string(),
            format!("{hung}/v2/health/live did not answer within 200ms (hung?)")
        );

        let dead = format!("127.0.0.1:{}", free_port().unwrap());
        let why = probe_live(&dead, Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(why.label(), "unreachable");
        let why = why.to_string();
        assert!(
            why.starts_with(&format!("{dead}/v2/health/live did not answer: "))
                && why.contains("Connection refused"),
            "{why}"
        );
    }
}
