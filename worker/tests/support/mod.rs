//! What the integration tests share: the real tritonserver (installed by
//! scripts/install-tritonserver.sh into <repo>/.local), started on free 127.0.0.1 ports with both
//! model repositories, and the tools next to it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;
use stress_common::tritonserver::{ServerSpec, TritonServer, find_binary, tail_lines};

/// Tests that start a server take this first: on 2 shared cores, two servers loading eleven
/// python models at once only make each other slow.
pub static SERVER_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a server may take to load every model (a few seconds when the machine is idle).
pub const READY_TIMEOUT: Duration = Duration::from_secs(180);

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("worker/ is inside the repository")
        .to_path_buf()
}

/// The perf_analyzer the install script puts next to tritonserver.
pub fn perf_analyzer() -> PathBuf {
    let p = repo_root().join(".local/bin/perf_analyzer");
    assert!(
        p.is_file(),
        "{} not found: run scripts/install-tritonserver.sh",
        p.display()
    );
    p
}

/// Starts a real tritonserver serving models/ and models-faulty/ and waits until it is ready.
/// The log goes to <target>/tmp/tritonserver-<name>.log.
pub async fn start_server(name: &str) -> TritonServer {
    start_server_with(name, |_| {}).await
}

/// `start_server`, with the spec changed by `configure` first (ports, repositories, flags).
pub async fn start_server_with(
    name: &str,
    configure: impl FnOnce(&mut ServerSpec),
) -> TritonServer {
    let binary = find_binary(Some(&repo_root())).unwrap_or_else(|e| {
        panic!("these tests need a real tritonserver: {e}");
    });
    let root = repo_root();
    let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("tritonserver-{name}.log"));
    let mut spec = ServerSpec::new(
        binary,
        vec![root.join("models"), root.join("models-faulty")],
        log.clone(),
    );
    configure(&mut spec);
    TritonServer::start_ready(spec, READY_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("tritonserver {name} did not become ready: {e}"))
}

/// Stops a server gracefully (SIGTERM; SIGKILL after the grace period).
pub async fn stop_server(mut server: TritonServer) {
    server.stop(Duration::from_secs(15)).await;
}

/// The last lines of a server's log, for assertion messages.
pub fn server_log(server: &TritonServer) -> String {
    tail_lines(&server.spec.log_file, 30)
}

/// How long a server that lost its listeners may take to end (its crash handler prints a
/// backtrace first).
const CRASH_EXIT_WAIT: Duration = Duration::from_secs(10);

/// Whether the server died of a signal on its own (not killed by the test); if it did, its log's
/// tail goes to stderr and it is started again on the same ports, its log appended to. For
/// tests whose subject is the worker, not tritonserver's own bugs.
pub async fn restarted_if_it_crashed(server: &mut TritonServer) -> bool {
    use std::os::unix::process::ExitStatusExt;
    // `wait` also reaps the dead server's model processes.
    let Ok(Some(status)) = tokio::time::timeout(CRASH_EXIT_WAIT, server.wait()).await else {
        return false;
    };
    let Some(signal) = status.signal() else {
        return false;
    };
    eprintln!(
        "tritonserver died of signal {signal} on its own; its log ends:\n{}",
        server_log(server)
    );
    let mut spec = server.spec.clone();
    spec.append_log = true;
    *server = TritonServer::start_ready(spec, READY_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("tritonserver did not start again after its crash: {e}"));
    true
}

/// `max_sequence_idle_microseconds` of a model in models/: how long Triton keeps an idle
/// sequence's slot before it reclaims it.
pub fn sequence_idle(model: &str) -> Duration {
    let path = repo_root().join("models").join(model).join("config.pbtxt");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let micros: u64 = text
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("max_sequence_idle_microseconds:")
                .map(|v| v.trim().parse().expect("an integer"))
        })
        .unwrap_or_else(|| panic!("{} has no max_sequence_idle_microseconds", path.display()));
    Duration::from_micros(micros)
}

/// A port on 127.0.0.1 that refuses connections for as long as this value lives: the socket is
/// bound but never listens, so a server started by a concurrent test cannot take the port (a
/// closed probe port could be reused at once, and then "nothing listens" would be false).
pub struct ClosedPort {
    socket: tokio::net::TcpSocket,
}

impl ClosedPort {
    pub fn new() -> Self {
        let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
        socket
            .bind("127.0.0.1:0".parse().unwrap())
            .expect("binding 127.0.0.1:0");
        Self { socket }
    }

    pub fn address(&self) -> String {
        self.socket.local_addr().expect("bound address").to_string()
    }
}
