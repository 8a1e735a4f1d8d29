//! A member that dies or hangs fails the run fast, naming it: a SIGKILLed tritonserver or
//! worker within 5 s of the kill, a hung (SIGSTOPped) worker or server, a network black hole
//! between a worker and its server; and a SIGKILLed driver leaves nothing of its run behind.

use crate::support::{
    self, Driver, FAIL_FAST_BOUND, Proc, RUN_LIMIT, SERVER, WORKER, alone, driver_cli, edit_matrix,
    ensure_worker, exit_after, external_matrix, pid_in, processes, read, read_json, smoke_matrix,
    start_external_server, start_loaded, zombie,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stress_common::contract::RunId;
use stress_common::status::{EventKind, Stopping};
use stress_common::store::{EventRow, Store};

/// Which process the fail-fast test kills.
#[derive(Debug, Clone, Copy)]
enum Victim {
    Server,
    Worker,
}

/// A 120 s smoke run whose worker runs and reports load.
struct LongRun {
    // Field order = drop order: the driver (and its members) go before the directory.
    driver: Driver,
    store: Store,
    run_id: String,
    run_dir: PathBuf,
    server_pid: u32,
    worker_pid: u32,
    _tmp: tempfile::TempDir,
}

/// The pid of `member` from the driver's event of `kind` about it.
fn member_pid(events: &[EventRow], member: &str, kind: EventKind) -> Option<u32> {
    events
        .iter()
        .filter(|e| e.member_id == member && e.kind == kind)
        .find_map(|e| pid_in(&e.details))
}

/// Starts a 120 s smoke run on SQLite and waits until its load flows ([`start_loaded`]); the
/// driver's events name the server's and the worker's pids.
async fn start_long_run(run_id: &str) -> LongRun {
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = smoke_matrix(tmp.path());
    let (mut driver, run_dir) = start_loaded(tmp.path(), &matrix, run_id, "120s").await;
    let store = Store::connect(&Store::sqlite_url(&run_dir.join("store.sqlite")))
        .await
        .unwrap();
    let events = store.events(&RunId::from(run_id), 0).await.unwrap();
    let pid = |member, kind| {
        member_pid(&events, member, kind)
            .unwrap_or_else(|| panic!("no {kind:?} event with the pid of {member}: {events:#?}"))
    };
    let (server_pid, worker_pid) = (
        pid(SERVER, EventKind::Running),
        pid(WORKER, EventKind::Starting),
    );
    driver.observe();
    assert!(
        driver.servers.contains_key(&server_pid),
        "the RUNNING event names pid {server_pid}, but the driver's tritonserver children are \
         {:?}",
        driver.servers.keys()
    );
    LongRun {
        driver,
        store,
        run_id: run_id.into(),
        run_dir,
        server_pid,
        worker_pid,
        _tmp: tmp,
    }
}

fn signal(pid: u32, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)
        .unwrap_or_else(|e| panic!("{signal} to pid {pid}: {e}"));
}

/// Starts a long run, SIGKILLs the server or the worker, and checks that the driver exits 1
/// within 5 s of the kill with a report that names the killed member.
async fn fail_fast_on_kill(victim: Victim) {
    let _run = alone().await;
    let run_id = format!("e2e-kill-{victim:?}").to_lowercase();
    let mut run = start_long_run(&run_id).await;
    let (server_pid, worker_pid, run_dir) = (run.server_pid, run.worker_pid, run.run_dir.clone());
    let driver = &mut run.driver;

    let (member, pid, role) = match victim {
        Victim::Server => (SERVER, server_pid, "SERVER"),
        Victim::Worker => (WORKER, worker_pid, "CLIENT"),
    };
    let (status, took) = exit_after(driver, async {
        signal(pid, nix::sys::signal::Signal::SIGKILL)
    })
    .await;

    assert_eq!(status.code(), Some(1), "{}", driver.output());
    assert!(
        took <= FAIL_FAST_BOUND,
        "the driver exited {took:?} after {member} was killed (bound {FAIL_FAST_BOUND:?})\n{}",
        driver.output()
    );
    eprintln!("{member} SIGKILLed: the driver exited 1 after {took:?}");
    // The verdict: the killed member, and why.
    let verdict =
        format!("FAILED: {member}: killed by signal 9 (SIGKILL) before the end of the run");
    assert!(
        driver.stdout().lines().any(|l| l == verdict),
        "no `{verdict}` line\n{}",
        driver.output()
    );

    // report.txt: the member's block with its reason, exit, reproduce command and log tail.
    let report = read(&run_dir.join("report.txt"));
    assert!(
        report.starts_with(&format!("Run {run_id} (local launcher): FAIL\n")),
        "{report}"
    );
    let heading = format!("== FAILED {role} {member} (group ");
    let block = report
        .split("\n\n")
        .find(|b| b.starts_with(&heading))
        .unwrap_or_else(|| panic!("report.txt has no `{heading}` block:\n{report}"));
    let field = |key: &str| {
        block
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no `{key}` line in:\n{block}"))
    };
    assert_eq!(
        field("reason: "),
        "killed by signal 9 (SIGKILL) before the end of the run"
    );
    assert_eq!(field("exit: "), "killed by signal 9 (SIGKILL)");
    assert_eq!(
        field("log_file: "),
        run_dir
            .join(format!("logs/{member}.log"))
            .display()
            .to_string()
    );
    let reproduce = field("reproduce: ");
    let program = match victim {
        Victim::Server => "tritonserver",
        Victim::Worker => "/worker",
    };
    assert!(reproduce.contains(program), "reproduce: {reproduce}");
    let tail: Vec<&str> = block
        .split_once("\nlog tail:\n")
        .unwrap_or_else(|| panic!("no log tail in:\n{block}"))
        .1
        .lines()
        .filter_map(|l| l.strip_prefix("  | "))
        .collect();
    assert!(
        tail.iter().any(|l| !l.trim().is_empty()),
        "empty log tail:\n{block}"
    );
    assert!(
        !block.contains('\u{1b}'),
        "terminal escape codes in the report:\n{block}"
    );

    // report.json says the same.
    let json = read_json(&run_dir.join("report.json"));
    assert_eq!(json["verdict"], "FAIL");
    let failed = json["failed_members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["member_id"] == member)
        .unwrap_or_else(|| panic!("{member} not among the failed members: {json:#}"));
    assert_eq!(failed["diagnostics"]["exit"]["signal"], 9, "{failed:#}");
    assert_eq!(failed["role"], role);
    if let Victim::Worker = victim {
        // Nothing else failed: the server was stopped by the driver, not by a failure.
        assert_eq!(
            json["failed_members"].as_array().unwrap().len(),
            1,
            "{json:#}"
        );
    }
    // Root cause first: the killed member leads; a killed server's client failures (its
    // connection errors) are grouped under it, none counted as independent.
    let analysis = &json["analysis"];
    assert_eq!(analysis["root_cause"]["member_id"], member, "{analysis:#}");
    // Whose fault: a killed server is the server's; a killed worker is ours (the harness).
    let class = match victim {
        Victim::Server => "server",
        Victim::Worker => "harness",
    };
    assert_eq!(analysis["root_cause"]["class"], class, "{analysis:#}");
    assert!(
        report.contains(&format!("== Root cause ==\n{role} {member} at ")),
        "{report}"
    );
    // Counts: the workers stopped and flushed before the servers' last sample, so a killed
    // worker's run compares both sides, and what the server served beyond the workers' counts
    // is the killed worker's unreported last requests (named), never an unexplained mismatch.
    // A killed server's counters die with it: nothing to compare, and the report says so.
    let rows = json["reconciliation"].as_array().expect("reconciliation");
    assert!(!rows.is_empty(), "{json:#}");
    for r in rows {
        match victim {
            Victim::Worker => {
                assert_ne!(r["verdict"], "mismatch", "{r:#}");
                assert_ne!(r["verdict"], "not_sampled", "{r:#}");
                if r["gap"].as_i64().unwrap() > 0 && r["verdict"] == "explained" {
                    let why = r["explanation"].as_str().unwrap();
                    assert!(
                        why.contains(&format!("{WORKER} was killed (SIGKILL)"))
                            || why.contains("did not see answered"),
                        "{r:#}"
                    );
                }
            }
            Victim::Server => assert_eq!(r["verdict"], "not_sampled", "{r:#}"),
        }
    }
    if let Victim::Server = victim {
        assert_eq!(analysis["independent_failures"], 0, "{analysis:#}");
        assert_eq!(
            analysis["independent_members"],
            Value::Array(vec![]),
            "{analysis:#}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_fails_the_run_within_5_s() {
    fail_fast_on_kill(Victim::Server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_fails_the_run_within_5_s() {
    fail_fast_on_kill(Victim::Worker).await;
}

/// A worker that hangs (SIGSTOP: its process runs, sends nothing, reports nothing) fails the
/// run on its stale heartbeat (3 polls here), and the driver, which reads the store itself and
/// sees the process use no CPU, says it is hung rather than cut off from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_worker_is_named_hung_not_cut_off_from_the_store() {
    let _run = alone().await;
    let mut run = start_long_run("e2e-hung-worker").await;
    // driver serve lists the run under way as RUNNING (its lease holds) and rebuilds its report
    // so far from the store the driver is writing, read-only.
    let served = support::Serve::start(run.run_dir.parent().unwrap(), None);
    let listed: Value = serde_json::from_str(
        &support::get(&format!("{}/api/runs", served.base))
            .await
            .body,
    )
    .unwrap();
    assert_eq!(
        (&listed[0]["run_id"], &listed[0]["verdict"]),
        (&json!("e2e-hung-worker"), &json!("RUNNING")),
        "{listed:#}"
    );
    let so_far = support::get(&format!("{}/runs/e2e-hung-worker", served.base)).await;
    assert_eq!(so_far.status, 200, "{}", so_far.body);
    // Under way: the page reloads itself and says what the run has done so far.
    assert!(
        so_far
            .body
            .contains("<meta http-equiv=\"refresh\" content=\"5\">")
    );
    assert!(
        so_far.body.contains("<p class=\"live\">Running for "),
        "{}",
        so_far.body
    );
    assert!(
        so_far.body.contains("<table class=\"live\">"),
        "{}",
        so_far.body
    );
    signal(run.worker_pid, nix::sys::signal::Signal::SIGSTOP);
    let status = run.driver.wait(RUN_LIMIT, false).await;
    assert_eq!(status.code(), Some(1), "{}", run.driver.output());
    let listed: Value = serde_json::from_str(
        &support::get(&format!("{}/api/runs", served.base))
            .await
            .body,
    )
    .unwrap();
    assert_eq!(listed[0]["verdict"], "FAIL", "{listed:#}");
    let ended = support::get(&format!("{}/runs/e2e-hung-worker", served.base)).await;
    assert!(
        !ended.body.contains("http-equiv=\"refresh\""),
        "an ended run's page stays"
    );
    drop(served);
    let report = read_json(&run.run_dir.join("report.json"));
    assert_eq!(report["verdict"], "FAIL");
    let root = &report["analysis"]["root_cause"];
    assert_eq!(root["member_id"], WORKER, "{root:#}");
    let reason = root["reason"].as_str().unwrap();
    assert!(reason.starts_with("no heartbeat for "), "{root:#}");
    assert!(
        reason.contains("is stopped (state T") && reason.contains("the worker is hung"),
        "{root:#}"
    );
    assert!(!reason.contains("do not reach the store"), "{root:#}");
    assert_eq!(root["class"], "harness", "{root:#}");
    assert!(
        root["evidence"].as_str().unwrap().contains("hung"),
        "{root:#}"
    );
}

/// A server that hangs (SIGSTOP: its ports still accept connections, nothing answers) fails the
/// run; from the first FAILURE event to the driver's exit takes at most 5 s too, although the
/// driver's last scrape of the hung server's /metrics cannot get an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_fails_the_run_within_5_s_of_the_failure() {
    let _run = alone().await;
    let mut run = start_long_run("e2e-hung-server").await;
    signal(run.server_pid, nix::sys::signal::Signal::SIGSTOP);
    let status = run.driver.wait(RUN_LIMIT, false).await;
    let exited_ms = stress_common::now_ms();
    assert_eq!(status.code(), Some(1), "{}", run.driver.output());
    let first = run
        .store
        .first_failure(&RunId::from(&run.run_id))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no FAILURE event\n{}", run.driver.output()));
    let took = Duration::from_millis((exited_ms - first.at_ms).max(0) as u64);
    eprintln!(
        "{SERVER} hung; {} failed ({}); the driver exited 1 {took:?} later",
        first.member_id, first.details
    );
    assert!(
        took <= FAIL_FAST_BOUND,
        "the driver exited {took:?} after the first failure ({}: {}), bound {FAIL_FAST_BOUND:?}\n{}",
        first.member_id,
        first.details,
        run.driver.output()
    );
    let report = read_json(&run.run_dir.join("report.json"));
    assert_eq!(report["verdict"], "FAIL");
    assert_eq!(
        report["failed_members"][0]["member_id"], first.member_id,
        "{report:#}"
    );
    // The worker notices first (no progress), but the blame goes to the server that does not
    // answer its liveness probe.
    assert_eq!(first.member_id, SERVER, "{report:#}");
    assert!(
        first.details.contains("/v2/health/live did not answer"),
        "{}",
        first.details
    );
}

/// No orphans: a driver killed with SIGKILL (no chance to stop anything) takes its local
/// tritonserver and worker with it (their parent-death signal), and a driver that gets a second
/// SIGTERM while stopping exits at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_driver_leaves_no_server_or_worker_behind() {
    let _run = alone().await;
    let mut run = start_long_run("e2e-driver-killed").await;
    let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists() && !zombie(pid);
    signal(run.driver.child.id(), nix::sys::signal::Signal::SIGKILL);
    let deadline = Instant::now() + Duration::from_secs(15);
    while (alive(run.server_pid) || alive(run.worker_pid)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !alive(run.server_pid),
        "tritonserver {} outlived its driver",
        run.server_pid
    );
    assert!(
        !alive(run.worker_pid),
        "worker {} outlived its driver",
        run.worker_pid
    );
    run.driver.try_exit();

    // Its run held a lease the driver no longer renews. Once the lease has run out (moved into
    // the past here instead of waiting its 2 minutes), `driver cleanup` ends the run as
    // ABANDONED, once, and the report says so.
    let row = run
        .store
        .run(&RunId::from(&run.run_id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.verdict, None);
    let until = row
        .lease_until_ms
        .expect("the driver holds a lease on its run");
    assert!(until > stress_common::now_ms(), "{row:?}");
    run.store
        .renew_lease(&RunId::from(&run.run_id), stress_common::now_ms() - 1)
        .await
        .unwrap();
    let runs_dir = run.run_dir.parent().unwrap().to_str().unwrap().to_string();
    let cleanup = driver_cli(&["cleanup", "--runs-dir", &runs_dir]);
    let said = String::from_utf8_lossy(&cleanup.stdout);
    assert!(cleanup.status.success(), "{cleanup:?}");
    assert!(
        said.contains(&format!("run {}: ABANDONED", run.run_id)),
        "{said}"
    );
    let again = driver_cli(&["cleanup", "--runs-dir", &runs_dir]);
    assert!(!String::from_utf8_lossy(&again.stdout).contains("ABANDONED"));
    // Naming the local run needs no Kubernetes (a kubeconfig that does not exist would fail).
    let by_id = Command::new(env!("CARGO_BIN_EXE_driver"))
        .args(["cleanup", "--run", &run.run_id, "--runs-dir", &runs_dir])
        .env_remove("DATABASE_URL")
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&by_id.stdout);
    assert!(by_id.status.success(), "{by_id:?}");
    assert!(
        said.contains(&format!("run {}: local launcher", run.run_id))
            && said.contains("no Kubernetes objects to delete"),
        "{said}"
    );
    let report = driver_cli(&["report", "--run", &run.run_id, "--runs-dir", &runs_dir]);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains(&format!("Run {} (local launcher): ABANDONED", run.run_id)),
        "{text}"
    );
    assert!(text.contains("the driver's lease ran out"), "{text}");
    assert!(
        text.contains("class harness: the run's driver died"),
        "{text}"
    );

    // Twice SIGTERM: the first stops the run cleanly, the second ends the driver at once. A
    // stopped (SIGSTOP) worker holds the driver's stop for its grace, so the second signal
    // comes while the driver is stopping however fast the rest stops (it once finished in
    // 0.27 s, before the second signal came).
    let run = start_long_run("e2e-driver-second-signal").await;
    let driver_pid = run.driver.child.id();
    signal(run.worker_pid, nix::sys::signal::Signal::SIGSTOP);
    signal(driver_pid, nix::sys::signal::Signal::SIGTERM);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = Instant::now();
    signal(driver_pid, nix::sys::signal::Signal::SIGTERM);
    let mut driver = run.driver;
    let status = driver.wait(Duration::from_secs(10), false).await;
    assert!(
        second.elapsed() < Duration::from_secs(3),
        "the driver took {:?} after the second SIGTERM",
        second.elapsed()
    );
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    // The worker's SIGTERM (the driver's, or its parent-death signal) waits for SIGCONT.
    signal(run.worker_pid, nix::sys::signal::Signal::SIGCONT);
    assert!(
        driver.output().contains("a second signal: exiting now"),
        "{}",
        driver.output()
    );
    // The first signal's stop is dated and says the run failed: its workers were told to drop
    // their tests in flight, not to drain them.
    assert_eq!(
        run.store.stopping(&RunId::from(&run.run_id)).await.unwrap(),
        Some(Stopping::Failed {
            member: "driver".into()
        })
    );
}

/// A TCP relay to `upstream` that can turn into a network black hole: from then on every byte
/// either way, and every new connection's, vanishes (nothing is refused or reset), as when a
/// route or a firewall drops a worker's packets to its server.
struct BlackHoleRelay {
    address: String,
    holed: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl BlackHoleRelay {
    async fn start(upstream: String) -> Self {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let holed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = holed.clone();
        // Copies `from` to `to` until the hole opens; then reads and drops everything.
        async fn pipe(
            mut from: tokio::net::tcp::OwnedReadHalf,
            mut to: tokio::net::tcp::OwnedWriteHalf,
            holed: Arc<std::sync::atomic::AtomicBool>,
        ) {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match from.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if !holed.load(Ordering::Relaxed) && to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pipe(client_read, server_write, flag.clone()));
                tokio::spawn(pipe(server_read, client_write, flag.clone()));
            }
        });
        Self {
            address,
            holed,
            task,
        }
    }

    fn open_the_hole(&self) {
        self.holed.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for BlackHoleRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A network black hole between the worker and its server (the server itself stays live): the
/// worker's requests get no answer, each fails at its deadline (2 s here), and the run fails
/// naming the worker, not the server, whose liveness probe (on its own address) still
/// answers. Exit 1 within a few seconds of the deadline; the report's root cause is the
/// worker's timeout; every request the server answered before the hole is one the worker
/// counted (reconciled or explained, never a mismatch); nothing is left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_black_hole_between_worker_and_server_fails_the_run_naming_the_worker() {
    let _run = alone().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let server = start_external_server(tmp.path()).await;
    let relay = BlackHoleRelay::start(server.grpc_address()).await;
    let matrix = edit_matrix(
        external_matrix(
            tmp.path(),
            driver::matrix::Endpoint::Ports(driver::matrix::EndpointPorts {
                grpc: Some(relay.address.clone()),
                http: Some(server.http_address()),
                metrics: Some(server.metrics_address()),
            }),
        ),
        |m| {
            for t in m.client_templates.values_mut() {
                t.extra_args = vec!["--request-timeout".into(), "2s".into()];
            }
        },
    );
    let run_id = "e2e-black-hole";
    let (mut driver, run_dir) = start_loaded(tmp.path(), &matrix, run_id, "120s").await;
    let (status, took) = exit_after(&mut driver, async { relay.open_the_hole() }).await;
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    // The request deadline (2 s), then fail-fast.
    assert!(
        took <= Duration::from_secs(2) + FAIL_FAST_BOUND,
        "the driver exited {took:?} after the black hole opened\n{}",
        driver.output()
    );
    eprintln!("black hole: the driver exited 1 after {took:?}");
    assert!(
        driver
            .stdout()
            .lines()
            .any(|l| l.starts_with(&format!("FAILED: {WORKER}: "))),
        "the verdict does not name {WORKER}\n{}",
        driver.output()
    );
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["verdict"], "FAIL");
    let root = &report["analysis"]["root_cause"];
    eprintln!("black hole: root cause {root}");
    assert_eq!(root["member_id"], WORKER, "{root:#}");
    let reason = root["reason"].as_str().unwrap().to_lowercase();
    assert!(
        reason.contains("deadline") || reason.contains("timed out") || reason.contains("timeout"),
        "the root cause is the worker's timeout: {root:#}"
    );
    assert!(
        !report["failed_members"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["member_id"] == SERVER),
        "the live server is not blamed: {report:#}"
    );
    for r in report["reconciliation"].as_array().unwrap() {
        assert_ne!(r["verdict"], "mismatch", "{r:#}");
    }
    driver.observe();
    assert!(
        driver.servers.is_empty(),
        "the driver launched a tritonserver"
    );
    let left: Vec<Proc> = processes()
        .into_iter()
        .filter(|p| p.args.iter().any(|a| a == run_id))
        .collect();
    assert!(left.is_empty(), "left running after the driver: {left:?}");
    drop(relay);
}
