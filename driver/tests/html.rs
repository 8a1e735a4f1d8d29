//! report.html in a real browser: Debian's headless chromium, driven through the DevTools
//! protocol (the headless_chrome crate), opens the page of a real run that failed (the smoke
//! matrix on add_sub, its worker SIGKILLed once load flows) and checks that
//! - no console error, failed load or uncaught exception happens (the page's
//!   Content-Security-Policy refuses any fetch, so an external URL would show up here);
//! - every plot with data in report.json has as many points in the DOM, and every plot without
//!   says "no data";
//! - the root cause box names the killed worker, and its `<details>` section opens on a click
//!   and shows its diagnostics;
//! - `driver report --format html` rebuilds the same page (and `--json` still works).
//!
//! Needs /usr/bin/chromium (`scripts/install-chromium.sh`; `TRITON_STRESS_SKIP_BROWSER=1` skips
//! the test, saying so) and what `scripts/install-tritonserver.sh` installs into `<repo>/.local`.

use headless_chrome::protocol::cdp::types::Event;
use headless_chrome::{Browser, LaunchOptions};
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stress_common::contract::RunId;
use stress_common::status::EventKind;
use stress_common::store::Store;

mod support;
use support::{Serve, ensure_worker, get, pid_in, repo_root};

const CHROMIUM: &str = "/usr/bin/chromium";
/// Flags without which chromium hangs on a closed network (it tries to reach Google's
/// services), or cannot start as root in a container.
const CHROMIUM_FLAGS: [&str; 8] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];
const WORKER: &str = "grpc-clients-0";
/// From the driver's start to load flowing (server start-up on 2 loaded cores included).
const START_LIMIT: Duration = Duration::from_secs(300);
/// QPS samples of the worker before it is killed: the QPS plot has points to count.
const SAMPLES: usize = 4;

/// Whether the browser is there; when not, fails naming the installer, or with
/// `TRITON_STRESS_SKIP_BROWSER=1` says the test is skipped.
fn chromium_or_skip() -> bool {
    if Path::new(CHROMIUM).is_file() {
        return true;
    }
    if std::env::var("TRITON_STRESS_SKIP_BROWSER").as_deref() == Ok("1") {
        eprintln!(
            "SKIPPED: {CHROMIUM} is missing and TRITON_STRESS_SKIP_BROWSER=1: report.html was not \
             checked in a browser"
        );
        return false;
    }
    panic!(
        "{CHROMIUM} is missing: run scripts/install-chromium.sh (Debian's chromium), or set \
         TRITON_STRESS_SKIP_BROWSER=1 to skip the browser test"
    );
}

/// test-matrices/smoke.yaml with add_sub's Infer only (light on 2 cores), an SLO rule the run
/// keeps, and limits for a loaded machine; written into `dir`.
fn matrix(dir: &Path) -> PathBuf {
    let committed = repo_root().join("test-matrices");
    let mut m =
        driver::matrix::load(&committed.join("smoke.yaml")).unwrap_or_else(|e| panic!("{e}"));
    m.source_path = None;
    m.run.server_ready_timeout = Duration::from_secs(300);
    m.run.fail_fast.heartbeat_timeout_polls = 10;
    m.run.fail_fast.zero_qps_polls = 10;
    m.run.slo = serde_saphyr::from_str("[{metric: p99, scenario: Infer, max: 10s}]").unwrap();
    for template in m.server_templates.values_mut() {
        for repo in &mut template.model_repositories {
            let path = committed.join(&*repo).canonicalize().unwrap();
            *repo = path.to_str().unwrap().to_string();
        }
    }
    for template in m.client_templates.values_mut() {
        template.scenarios = None;
        template.models = serde_saphyr::from_str("[{name: add_sub}]").unwrap();
    }
    let path = dir.join("html.yaml");
    std::fs::write(&path, serde_saphyr::to_string(&m).unwrap()).unwrap();
    path
}

/// The driver process; stopped (SIGTERM, then SIGKILL) if the test fails while it runs.
struct DriverProcess {
    child: Child,
    output: PathBuf,
}

impl DriverProcess {
    fn output(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_default()
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("waiting on the driver")
    }
}

impl Drop for DriverProcess {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.exited().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs the matrix until the worker has reported `SAMPLES` QPS samples, SIGKILLs it, and waits
/// for the driver's verdict (exit 1). Returns the run's directory and the runs directory.
async fn failed_run(tmp: &Path, run_id: &str) -> (PathBuf, PathBuf) {
    let matrix = matrix(tmp);
    let runs = tmp.join("runs");
    let output = tmp.join("driver.log");
    let mut driver = DriverProcess {
        child: Command::new(env!("CARGO_BIN_EXE_driver"))
            .args(["run", matrix.to_str().unwrap(), "--runs-dir"])
            .arg(&runs)
            .args(["--run-id", run_id, "--duration", "120s", "--no-progress"])
            .current_dir(repo_root())
            .env_remove("DATABASE_URL")
            .env_remove("TRITON_STRESS_RUNS_DIR")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&output).unwrap())
            .stderr(std::fs::File::create(tmp.join("driver.err")).unwrap())
            .spawn()
            .expect("the driver starts"),
        output,
    };
    let run_dir = runs.join(run_id);
    let store_file = run_dir.join("store.sqlite");
    let deadline = Instant::now() + START_LIMIT;
    let mut store = None;
    let worker_pid = loop {
        assert!(
            driver.exited().is_none(),
            "the driver ended before load flowed:\n{}",
            driver.output()
        );
        assert!(
            Instant::now() < deadline,
            "no load within {START_LIMIT:?}:\n{}",
            driver.output()
        );
        if store.is_none() && store_file.is_file() {
            store = Store::connect(&Store::sqlite_url(&store_file)).await.ok();
        }
        if let Some(st) = &store
            && let Ok(events) = st.events(&RunId::from(run_id), 0).await
            && let Some(pid) = events
                .iter()
                .filter(|e| e.member_id == WORKER && e.kind == EventKind::Starting)
                .find_map(|e| pid_in(&e.details))
            && let Ok(samples) = st.qps_samples(&RunId::from(run_id)).await
            && samples.iter().filter(|s| s.member_id == WORKER).count() >= SAMPLES
        {
            break pid;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL to the worker");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = driver.exited() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the driver did not stop:\n{}",
            driver.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    (run_dir, runs)
}

/// What the page shows of itself, read in the browser.
const PAGE_SUMMARY: &str = r#"JSON.stringify({
  plots: Array.from(document.querySelectorAll('figure.plot')).map(f => ({
    id: f.getAttribute('data-plot'),
    points: f.querySelectorAll('circle.pt').length,
    declared: Array.from(f.querySelectorAll('g.series'))
      .reduce((n, g) => n + Number(g.getAttribute('data-points')), 0),
    noData: f.querySelector('p.no-data') ? f.querySelector('p.no-data').textContent : null,
  })),
  rootCause: (document.querySelector('.root-cause .first-failure') || {}).textContent || null,
  verdict: document.getElementById('verdict').textContent,
  verdictColors: [getComputedStyle(document.getElementById('verdict')).color,
                  getComputedStyle(document.getElementById('verdict')).backgroundColor],
})"#;

/// What report.json says each plot must show: its id and number of points (0: "no data").
fn expected_plots(report: &Value) -> BTreeMap<String, usize> {
    let mut plots = BTreeMap::new();
    // QPS per group: each worker's samples on whole seconds (the run is short), its final 0
    // left out, one point per (group, second).
    let mut seconds: BTreeMap<String, std::collections::BTreeSet<i64>> = BTreeMap::new();
    for w in report["workers"].as_array().unwrap() {
        let mut series: Vec<(f64, f64)> = w["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_f64().unwrap(), p[1].as_f64().unwrap()))
            .collect();
        if series.len() > 1 && series.last().unwrap().1 == 0.0 {
            series.pop();
        }
        let group = seconds
            .entry(w["group"].as_str().unwrap().to_string())
            .or_default();
        group.extend(series.iter().map(|p| p.0.floor() as i64));
    }
    plots.insert(
        "qps-groups".to_string(),
        seconds.values().map(|s| s.len()).sum(),
    );
    let timeline = &report["timeline"];
    let mut latency = 0;
    for s in timeline["latency"].as_array().unwrap() {
        if s["model"].is_null() && !s["points"].as_array().unwrap().is_empty() {
            let n = s["points"].as_array().unwrap().len();
            plots.insert(
                format!("latency-{}", s["scenario"].as_str().unwrap()),
                3 * n,
            );
            latency += n;
        }
    }
    if latency == 0 {
        plots.insert("latency".into(), 0);
    }
    let mut memory = 0;
    let mut server_time = 0;
    for s in timeline["servers"].as_array().unwrap() {
        memory += s["points"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| !p["rss_bytes"].is_null() || !p["cpu_memory_used_bytes"].is_null())
            .count();
        let n: usize = s["models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| 2 * m["points"].as_array().unwrap().len())
            .sum();
        if n > 0 {
            plots.insert(
                format!("server-time-{}", s["member_id"].as_str().unwrap()),
                n,
            );
            server_time += n;
        }
    }
    if server_time == 0 {
        plots.insert("server-time".into(), 0);
    }
    plots.insert("server-memory".into(), memory);
    // Not a capacity run: it says so.
    assert!(report.get("capacity").is_none());
    plots.insert("capacity".into(), 0);
    plots
}

/// Opens the page in chromium and checks it (see the module's doc). Blocking.
/// Headless chromium under the DevTools protocol, with its own profile directory (kept as long
/// as the browser runs).
fn chromium() -> (tempfile::TempDir, Browser) {
    let profile = tempfile::tempdir().unwrap();
    let browser = Browser::new(LaunchOptions {
        path: Some(CHROMIUM.into()),
        headless: true,
        sandbox: false,
        user_data_dir: Some(profile.path().to_path_buf()),
        args: CHROMIUM_FLAGS.iter().map(OsStr::new).collect(),
        idle_browser_timeout: Duration::from_secs(120),
        ..LaunchOptions::default()
    })
    .expect("chromium starts under the DevTools protocol");
    (profile, browser)
}

fn check_in_browser(url: &str, report: &Value) {
    let (_profile, browser) = chromium();
    let tab = browser.new_tab().expect("a tab");
    tab.set_default_timeout(Duration::from_secs(60));

    // Console errors, failed loads (a refused fetch is logged as an error) and uncaught
    // exceptions, from before the page loads.
    let problems: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = problems.clone();
    tab.add_event_listener(Arc::new(move |event: &Event| {
        let problem = match event {
            Event::RuntimeExceptionThrown(e) => {
                let d = &e.params.exception_details;
                Some(format!(
                    "{}: {:?}",
                    d.text,
                    d.exception.as_ref().and_then(|x| x.description.as_ref())
                ))
            }
            Event::RuntimeConsoleAPICalled(e)
                if matches!(
                    e.params.Type,
                    headless_chrome::protocol::cdp::Runtime::ConsoleAPICalledEventTypeOption::Error
                        | headless_chrome::protocol::cdp::Runtime::ConsoleAPICalledEventTypeOption::Assert
                ) =>
            {
                Some(format!("console error: {:?}", e.params.args))
            }
            Event::LogEntryAdded(e)
                if matches!(
                    e.params.entry.level,
                    headless_chrome::protocol::cdp::Log::LogEntryLevel::Error
                ) =>
            {
                Some(format!("logged error: {}", e.params.entry.text))
            }
            _ => None,
        };
        if let Some(p) = problem {
            seen.lock().unwrap().push(p);
        }
    }))
    .unwrap();
    tab.enable_runtime().unwrap();
    tab.enable_log().unwrap();
    tab.navigate_to(url)
        .unwrap()
        .wait_until_navigated()
        .unwrap();

    let summary = tab.evaluate(PAGE_SUMMARY, false).unwrap();
    let summary: Value = serde_json::from_str(
        summary
            .value
            .as_ref()
            .and_then(Value::as_str)
            .expect("the page summary is a string"),
    )
    .unwrap();
    eprintln!("page summary: {summary:#}");
    assert_eq!(summary["verdict"], "FAIL", "{summary:#}");
    // Readable: its text is not the colour of its badge.
    let colors = &summary["verdictColors"];
    assert_ne!(colors[0], colors[1], "the verdict is invisible: {colors}");
    let root_cause = summary["rootCause"].as_str().expect("a root cause box");
    assert!(
        root_cause.contains(&format!("CLIENT {WORKER}"))
            && root_cause.contains("killed by signal 9 (SIGKILL)"),
        "{root_cause}"
    );

    let shown: BTreeMap<String, &Value> = summary["plots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap().to_string(), p))
        .collect();
    let expected = expected_plots(report);
    assert!(expected["qps-groups"] >= SAMPLES - 1, "{expected:?}");
    for (id, n) in &expected {
        let plot = shown
            .get(id)
            .unwrap_or_else(|| panic!("no plot {id} on the page: {summary:#}"));
        assert_eq!(plot["points"], *n, "plot {id}: {plot:#}");
        assert_eq!(plot["declared"], *n, "plot {id}: {plot:#}");
        if *n == 0 {
            let why = plot["noData"].as_str().unwrap_or_default();
            assert!(why.starts_with("no data: "), "plot {id}: {plot:#}");
        } else {
            assert!(plot["noData"].is_null(), "plot {id}: {plot:#}");
        }
    }

    // The killed worker's section: closed, opened by a click on its summary, diagnostics shown.
    let section = format!("member-{WORKER}");
    let is_open = |tab: &headless_chrome::Tab| {
        tab.evaluate(&format!("document.getElementById('{section}').open"), false)
            .unwrap()
            .value
    };
    assert_eq!(is_open(&tab), Some(Value::Bool(false)));
    tab.find_element(&format!("#{section} > summary"))
        .expect("the failed worker's section")
        .click()
        .unwrap();
    assert_eq!(is_open(&tab), Some(Value::Bool(true)), "a click opens it");
    for (class, contains) in [("reproduce", "worker"), ("log-tail", "")] {
        let pre = tab
            .find_element(&format!("#{section} pre.{class}"))
            .unwrap_or_else(|e| panic!("no {class} in the failed worker's section: {e}"));
        assert!(pre.is_visible().unwrap(), "{class} is not visible");
        let text = pre.get_inner_text().unwrap();
        assert!(
            !text.trim().is_empty() && text.contains(contains),
            "{class}: {text}"
        );
    }
    let exit = tab
        .find_element(&format!("#{section} dl"))
        .unwrap()
        .get_inner_text()
        .unwrap();
    assert!(exit.contains("killed by signal 9 (SIGKILL)"), "{exit}");

    // Events arrive asynchronously: give a late one time to land.
    std::thread::sleep(Duration::from_millis(500));
    let problems = problems.lock().unwrap();
    assert!(
        problems.is_empty(),
        "the page had problems in the browser:\n{}",
        problems.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_html_of_a_failed_run_renders_in_chromium() {
    if !chromium_or_skip() {
        return;
    }
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let run_id = "html-killed-worker";
    let (run_dir, runs) = failed_run(tmp.path(), run_id).await;
    let page = run_dir.join("report.html");
    let html = std::fs::read_to_string(&page).expect("the run wrote report.html");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("report.json")).unwrap())
            .unwrap();

    // `driver report` rebuilds the same page from the store; --json is still --format json.
    let rebuild = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_driver"))
            .args(["report", "--run", run_id, "--runs-dir"])
            .arg(&runs)
            .args(args)
            .env_remove("DATABASE_URL")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(rebuild(&["--format", "html"]), html);
    let json: Value = serde_json::from_str(&rebuild(&["--json"])).unwrap();
    assert_eq!(json, report);

    let file_url = format!("file://{}", page.display());
    let for_browser = report.clone();
    tokio::task::spawn_blocking(move || check_in_browser(&file_url, &for_browser))
        .await
        .unwrap();

    // `driver serve` over the same runs directory: the list shows the run with its verdict,
    // and its page is the same report, rebuilt from the store, checked in the browser again.
    let served = Serve::start(&runs, None);
    let base = served.base.clone();
    let list = get(&format!("{base}/")).await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(
        list.body.contains(&format!("<tr data-run=\"{run_id}\">"))
            && list.body.contains("<td class=\"FAIL\">FAIL</td>"),
        "{}",
        list.body
    );
    let api: Value =
        serde_json::from_str(&get(&format!("{base}/api/runs?verdict=fail")).await.body).unwrap();
    assert_eq!(api[0]["run_id"], run_id, "{api:#}");
    let none: Value =
        serde_json::from_str(&get(&format!("{base}/api/runs?verdict=PASS")).await.body).unwrap();
    assert_eq!(none, serde_json::json!([]), "filtered by verdict");
    let page_served = get(&format!("{base}/runs/{run_id}")).await;
    // The same page, rebuilt from the store, with the links to the run's other documents.
    let nav_start = page_served
        .body
        .find("<nav id=\"run-links\">")
        .expect("the run's links");
    let nav_end = nav_start + page_served.body[nav_start..].find("</nav>\n").unwrap() + 7;
    assert_eq!(
        format!(
            "{}{}",
            &page_served.body[..nav_start],
            &page_served.body[nav_end..]
        ),
        html,
        "the same page, rebuilt from the store"
    );
    for link in ["report.json", "junit.xml", "diff", "failures"] {
        let href = format!("href=\"/runs/{run_id}/{link}\"");
        assert!(
            page_served.body[nav_start..nav_end].contains(&href),
            "{href}"
        );
    }
    let json: Value = serde_json::from_str(
        &get(&format!("{base}/api/runs/{run_id}/report.json"))
            .await
            .body,
    )
    .unwrap();
    assert_eq!(json, report);
    let junit = get(&format!("{base}/runs/{run_id}/junit.xml")).await;
    assert!(junit.body.starts_with("<?xml"), "{}", junit.body);
    for missing in ["/runs/no-such-run", "/runs/..%2F..%2Fetc", "/runs/.hidden"] {
        assert_eq!(
            get(&format!("{base}{missing}")).await.status,
            404,
            "{missing}"
        );
    }
    let name = api[0]["name"].as_str().unwrap().to_string();
    let history = get(&format!("{base}/matrix/{name}")).await;
    assert!(
        history
            .body
            .contains(&format!("href=\"/runs/{run_id}\" title=\"{run_id}: FAIL"))
            && history.body.contains("data-plot=\"history-qps\""),
        "{}",
        history.body
    );
    // Per scenario, from the summary the run wrote (an older summary has none).
    assert!(
        history.body.contains("data-plot=\"history-p99-scenarios\"")
            && !history
                .body
                .contains("no run recorded per-scenario figures"),
        "{}",
        history.body
    );
    let history: Value =
        serde_json::from_str(&get(&format!("{base}/api/matrix/{name}/history")).await.body)
            .unwrap();
    assert_eq!(history[0]["run_id"], run_id, "{history:#}");
    assert!(
        history[0]["scenarios"]
            .as_array()
            .is_some_and(|s| !s.is_empty()),
        "{history:#}"
    );
    let metrics = get(&format!("{base}/metrics")).await;
    assert!(
        metrics
            .body
            .contains("triton_stress_runs{verdict=\"FAIL\"} 1"),
        "{}",
        metrics.body
    );
    promtool_accepts(&metrics.body);
    let run_url = format!("{base}/runs/{run_id}");
    let (list_url, expected_run) = (format!("{base}/"), run_id.to_string());
    tokio::task::spawn_blocking(move || {
        check_in_browser(&run_url, &report);
        check_list_in_browser(&list_url, &expected_run);
    })
    .await
    .unwrap();
    drop(served);

    // With a token every page but /healthz wants it.
    let guarded = Serve::start(&runs, Some("s3cret"));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let status = |path: &str, token: Option<&str>| {
        let mut request = client.get(format!("{}{path}", guarded.base));
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status("/", None).await, 401);
    assert_eq!(status("/metrics", Some("wrong")).await, 401);
    assert_eq!(status("/", Some("s3cret")).await, 200);
    assert_eq!(
        status(&format!("/runs/{run_id}"), Some("s3cret")).await,
        200
    );
    assert_eq!(status("/healthz", None).await, 200);
}

/// Prometheus's own checker of exposition text (Debian's prometheus package,
/// scripts/install-prometheus.sh).
fn promtool_accepts(text: &str) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (scripts/install-prometheus.sh)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The served list in the browser: the run's row with its verdict, its link opening the run's
/// report.
fn check_list_in_browser(url: &str, run_id: &str) {
    let (_profile, browser) = chromium();
    let tab = browser.new_tab().expect("a tab");
    tab.set_default_timeout(Duration::from_secs(60));
    tab.navigate_to(url)
        .unwrap()
        .wait_until_navigated()
        .unwrap();
    let verdict = tab
        .find_element(&format!("tr[data-run=\"{run_id}\"] td.FAIL"))
        .expect("the run's row with its verdict")
        .get_inner_text()
        .unwrap();
    assert_eq!(verdict, "FAIL");
    tab.find_element(&format!(
        "tr[data-run=\"{run_id}\"] a[href=\"/runs/{run_id}\"]"
    ))
    .expect("a link to the run")
    .click()
    .unwrap();
    // The click starts the navigation; it may not have begun when the click returns, so wait
    // for the report's title rather than for "navigated" (which a page not yet left is).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut title = String::new();
    while Instant::now() < deadline {
        title = tab.get_title().unwrap_or_default();
        if title.contains(run_id) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(title.contains(run_id), "the run's report opened: {title:?}");
}

/// deploy/'s `driver serve` reads the store as `triton_reader`, the role
/// deploy/base/postgres-reader.sh makes when the database is created (before the driver's
/// migrations make the tables): it lists and rebuilds a run, and it cannot write, not even the
/// migrations a store-opening command would run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reads_postgres_as_the_read_only_role_of_deploy() {
    use stress_common::store::NewRun;
    use stress_common::store::testing::TestPostgres;
    let Some(pg) = TestPostgres::from_env().unwrap_or_else(|e| panic!("{e}")) else {
        return;
    };
    let TestPostgres::Throwaway(pg) = pg else {
        use std::io::Write;
        writeln!(
            std::io::stderr(),
            "SKIPPED: the reader-role test makes a role: it needs a Postgres of its own \
             (TEST_DATABASE_URL is shared)"
        )
        .ok();
        return;
    };
    // postgres://postgres@127.0.0.1:PORT/postgres
    let url = pg.url().to_string();
    let port = url.rsplit_once(':').unwrap().1.split('/').next().unwrap();
    let path = format!(
        "/usr/lib/postgresql/15/bin:{}",
        std::env::var("PATH").unwrap_or_default()
    );
    let made = Command::new(repo_root().join("deploy/base/postgres-reader.sh"))
        .env("PATH", path)
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", port)
        .env("POSTGRES_USER", "postgres")
        .env("POSTGRES_DB", "postgres")
        .env("POSTGRES_READER_PASSWORD", "reader-secret")
        .output()
        .unwrap();
    assert!(made.status.success(), "postgres-reader.sh: {made:?}");

    // Before the first run, nothing to list (not an error page).
    let reader = url.replacen("postgres@", "triton_reader:reader-secret@", 1);
    let served = Serve::start_over_store(&reader);
    let empty = get(&format!("{}/api/runs", served.base)).await;
    assert_eq!(
        (empty.status, empty.body.trim()),
        (200, "[]"),
        "{}",
        empty.body
    );

    // The driver's store, migrated by its owner after the role was made.
    let store = Store::connect(&url).await.unwrap();
    let run_id = "deploy-reader-1";
    let started = stress_common::now_ms() - 60_000;
    store
        .create_run(&NewRun {
            run_id: run_id.into(),
            name: "nightly".into(),
            matrix_yaml: "version: 1\n".into(),
            launcher: "kube".into(),
            started_at_ms: started,
            fingerprint: None,
        })
        .await
        .unwrap();
    let summary = driver::report::summary::RunSummary {
        run_id: run_id.into(),
        name: "nightly".into(),
        launcher: "kube".into(),
        verdict: "PASS".into(),
        started_at_ms: started,
        finished_at_ms: Some(started + 30_000),
        ..Default::default()
    };
    store
        .save_document(&RunId::from(run_id), "", &summary)
        .await
        .unwrap();
    store
        .finish_run(&RunId::from(run_id), "PASS", started + 30_000)
        .await
        .unwrap();
    store.close().await;

    let api: Value =
        serde_json::from_str(&get(&format!("{}/api/runs", served.base)).await.body).unwrap();
    assert_eq!(
        (&api[0]["run_id"], &api[0]["verdict"]),
        (&Value::from(run_id), &Value::from("PASS")),
        "{api:#}"
    );
    let page = get(&format!("{}/runs/{run_id}", served.base)).await;
    assert_eq!(page.status, 200, "rebuilt as the reader: {}", page.body);
    let history = get(&format!("{}/matrix/nightly", served.base)).await;
    assert_eq!(history.status, 200, "{}", history.body);

    // The twin: the same role writing through the store's API is refused (its migrations
    // are all applied: opening it writes nothing).
    let writer = Store::connect(&reader).await.unwrap();
    let refused = [
        writer
            .create_run(&NewRun {
                run_id: "deploy-reader-2".into(),
                name: "nightly".into(),
                matrix_yaml: String::new(),
                launcher: "kube".into(),
                started_at_ms: started,
                fingerprint: None,
            })
            .await
            .err(),
        writer
            .finish_run(&RunId::from(run_id), "FAIL", started)
            .await
            .err(),
    ];
    for e in refused {
        let said = e.expect("the reader wrote").to_string();
        assert!(
            said.contains("read-only") || said.contains("permission denied"),
            "{said}"
        );
        assert!(
            !said.contains("reader-secret"),
            "the password is masked: {said}"
        );
    }
    writer.close().await;
}

/// A store that cannot be reached: the page says so (not as an error of the page: 503 with
/// Retry-After) and reloads itself; the server's log has why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_is_said_and_the_page_retries() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let served = Serve::start_over_store(&format!(
        "postgres://nobody:hunter2@127.0.0.1:{port}/nothing"
    ));
    let started = Instant::now();
    let page = get(&format!("{}/", served.base)).await;
    assert_eq!(page.status, 503, "{}", page.body);
    assert!(
        page.body.contains("id=\"store-unavailable\"")
            && page.body.contains("http-equiv=\"refresh\""),
        "{}",
        page.body
    );
    assert!(!page.body.contains("hunter2"), "no password on the page");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "answered while the store is down"
    );
}

/// A run's report lists its first 50 failures; `driver serve` pages through every record the
/// store kept (`/runs/ID/failures`, `/api/runs/ID/failures?after=&limit=`), linked from the
/// run's page: each record once, in the order recorded, the last page saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failure_record_is_paged_beyond_the_reports_first_fifty() {
    use stress_common::status::FailureRecord;
    use stress_common::store::NewRun;
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("paged");
    std::fs::create_dir_all(&run_dir).unwrap();
    let store = Store::connect(&Store::sqlite_url(&run_dir.join("store.sqlite")))
        .await
        .unwrap();
    let run_id = RunId::from("paged");
    store
        .create_run(&NewRun {
            run_id: "paged".into(),
            name: "nightly".into(),
            matrix_yaml: "version: 1\n".into(),
            launcher: "local".into(),
            started_at_ms: 1_764_000_000_000,
            fingerprint: None,
        })
        .await
        .unwrap();
    for i in 0..130i64 {
        let record = FailureRecord {
            at_ms: 1_764_000_000_000 + i,
            scenario: "Load".into(),
            model: "simple".into(),
            expected: "OUTPUT0 = INPUT0 + INPUT1".into(),
            actual: format!("<wrong answer {i}>"),
            ..Default::default()
        };
        let member = if i % 2 == 0 { "client-0" } else { "client-1" };
        assert!(
            store
                .record_failure(&run_id, &member.into(), &record)
                .await
                .unwrap()
        );
    }
    store
        .finish_run(&run_id, "FAIL", 1_764_000_100_000)
        .await
        .unwrap();
    store.close().await;

    let served = Serve::start(tmp.path(), None);
    let base = &served.base;
    let page = get(&format!("{base}/runs/paged")).await;
    assert!(
        page.body
            .contains("<a href=\"/runs/paged/failures\">every failure record</a>"),
        "{}",
        page.body
    );
    let mut after = 0;
    let mut seen: Vec<(i64, String)> = Vec::new();
    let mut pages = 0;
    loop {
        let body = get(&format!(
            "{base}/api/runs/paged/failures?after={after}&limit=50"
        ))
        .await
        .body;
        let page: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        pages += 1;
        for f in page["failures"].as_array().unwrap() {
            seen.push((
                f["id"].as_i64().unwrap(),
                f["record"]["actual"].as_str().unwrap().to_string(),
            ));
        }
        match page["next_after"].as_i64() {
            Some(next) => after = next,
            None => break,
        }
        assert!(pages < 10, "{page:#}");
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 130);
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0),
        "in the order recorded"
    );
    let wanted: Vec<String> = (0..130).map(|i| format!("<wrong answer {i}>")).collect();
    assert_eq!(
        seen.iter().map(|(_, a)| a.clone()).collect::<Vec<_>>(),
        wanted
    );
    // The HTML page: escaped, and a link to the next page until the last.
    let first = get(&format!("{base}/runs/paged/failures?limit=50")).await;
    assert_eq!(first.status, 200);
    assert!(
        first.body.contains("&lt;wrong answer 0&gt;")
            && !first.body.contains("<wrong answer")
            && first.body.contains(&format!(
                "id=\"next-page\" href=\"/runs/paged/failures?after={}&amp;limit=50\"",
                seen[49].0
            )),
        "{}",
        first.body
    );
    let last = get(&format!(
        "{base}/runs/paged/failures?after={}",
        seen[129].0 - 1
    ))
    .await;
    assert!(last.body.contains("id=\"last-page\""), "{}", last.body);
    assert_eq!(get(&format!("{base}/runs/nope/failures")).await.status, 404);
}

/// A server whose error message carries markup, in a run whose matrix name, member names and
/// FAILURE event carry it too: every served page (the list, the matrix history, the run's
/// report, its failure records) shows it as text in the browser; no element from it reaches
/// the DOM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markup_from_a_server_is_text_in_every_served_page_in_chromium() {
    use stress_common::status::FailureRecord;
    use stress_common::store::NewRun;
    if !chromium_or_skip() {
        return;
    }
    const HOSTILE: &str = "<img src=x onerror=\"document.title='pwned'\"><script>alert(1)</script>";
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("hostile");
    std::fs::create_dir_all(&run_dir).unwrap();
    let store = Store::connect(&Store::sqlite_url(&run_dir.join("store.sqlite")))
        .await
        .unwrap();
    let run_id = RunId::from("hostile");
    let started = 1_764_000_000_000;
    store
        .create_run(&NewRun {
            run_id: "hostile".into(),
            name: format!("nightly {HOSTILE}"),
            matrix_yaml: format!("version: 1\n# {HOSTILE}\n"),
            launcher: "local".into(),
            started_at_ms: started,
            fingerprint: None,
        })
        .await
        .unwrap();
    let record = FailureRecord {
        at_ms: started + 1000,
        scenario: "Load".into(),
        server: "127.0.0.1:8001".into(),
        model: "add_sub".into(),
        expected: "OUTPUT0 = INPUT0 + INPUT1".into(),
        actual: format!("server said: {HOSTILE}"),
        ..Default::default()
    };
    let member = "client-0".into();
    store
        .record_failure(&run_id, &member, &record)
        .await
        .unwrap();
    store
        .record_event(
            &run_id,
            &member,
            EventKind::Failure,
            &format!("Load failed: {HOSTILE}"),
        )
        .await
        .unwrap();
    // The row the list shows, as a run's end writes it.
    let summary = driver::report::summary::RunSummary {
        run_id: "hostile".into(),
        name: format!("nightly {HOSTILE}"),
        launcher: "local".into(),
        verdict: "FAIL".into(),
        started_at_ms: started,
        finished_at_ms: Some(started + 60_000),
        failures: 1,
        root_cause: Some(format!("client-0: Load failed: {HOSTILE}")),
        ..Default::default()
    };
    store.save_document(&run_id, "", &summary).await.unwrap();
    store
        .finish_run(&run_id, "FAIL", started + 60_000)
        .await
        .unwrap();
    store.close().await;

    let served = Serve::start(tmp.path(), None);
    let base = served.base.clone();
    let name = format!("nightly {HOSTILE}");
    let matrix = format!(
        "{base}/matrix/{}",
        name.bytes()
            .map(|b| if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            })
            .collect::<String>()
    );
    let pages = [
        format!("{base}/"),
        matrix,
        format!("{base}/runs/hostile"),
        format!("{base}/runs/hostile/failures"),
    ];
    for url in &pages {
        assert_eq!(get(url).await.status, 200, "{url}");
    }
    tokio::task::spawn_blocking(move || {
        let (_profile, browser) = chromium();
        let tab = browser.new_tab().expect("a tab");
        tab.set_default_timeout(Duration::from_secs(60));
        for url in pages {
            tab.navigate_to(&url).unwrap().wait_until_navigated().unwrap();
            let seen = tab
                .evaluate(
                    "JSON.stringify({imgs: document.querySelectorAll('img').length, \
                     scripts: Array.from(document.scripts).filter(s => s.textContent.includes('alert(1)')).length, \
                     title: document.title, \
                     shown: document.body.innerText.includes('<img src=x onerror=')})",
                    false,
                )
                .unwrap()
                .value
                .and_then(|v| v.as_str().map(String::from))
                .unwrap();
            let seen: Value = serde_json::from_str(&seen).unwrap();
            assert_eq!(seen["imgs"], 0, "{url}: {seen}");
            assert_eq!(seen["scripts"], 0, "{url}: {seen}");
            assert_ne!(seen["title"], "pwned", "{url}: {seen}");
            assert_eq!(seen["shown"], true, "shown as text on {url}: {seen}");
        }
    })
    .await
    .unwrap();
}

/// Benchmark, not a test (ignored; `cargo test -p driver --test html -- --ignored
/// bench_api_runs --nocapture`): `/api/runs` over 1,000 finished runs, from a runs directory
/// (one SQLite store each) and from one Postgres store. Prints the first answer (a runs
/// directory's index is cold) and the median of the next ten; asserts only that every run is
/// there to list. Recorded in docs/benchmarks.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: prints /api/runs times over 1,000 runs"]
async fn bench_api_runs_with_1000_runs() {
    use stress_common::store::NewRun;
    use stress_common::store::testing::TestPostgres;
    const RUNS: usize = 1000;
    async fn record(store: &Store, i: usize) {
        let run_id = format!("bench-{i:04}");
        let started = 1_764_000_000_000 + i as i64 * 86_400_000;
        store
            .create_run(&NewRun {
                run_id: run_id.clone(),
                name: "nightly".into(),
                matrix_yaml: "version: 1\n".into(),
                launcher: "local".into(),
                started_at_ms: started,
                fingerprint: None,
            })
            .await
            .unwrap();
        let summary = driver::report::summary::RunSummary {
            run_id: run_id.clone(),
            name: "nightly".into(),
            launcher: "local".into(),
            verdict: "PASS".into(),
            started_at_ms: started,
            finished_at_ms: Some(started + 3_600_000),
            ..Default::default()
        };
        let id = RunId::from(run_id.as_str());
        store.save_document(&id, "", &summary).await.unwrap();
        store
            .finish_run(&id, "PASS", started + 3_600_000)
            .await
            .unwrap();
    }
    async fn time(base: &str, label: &str) {
        let url = format!("{base}/api/runs");
        let t = Instant::now();
        let first = get(&url).await;
        let cold = t.elapsed();
        let listed: Value = serde_json::from_str(&first.body).unwrap();
        assert_eq!(listed.as_array().map(Vec::len), Some(200), "the newest 200");
        let mut warm = Vec::new();
        for _ in 0..10 {
            let t = Instant::now();
            assert_eq!(get(&url).await.status, 200);
            warm.push(t.elapsed());
        }
        warm.sort();
        println!(
            "BENCH /api/runs over {RUNS} runs, {label}: first {:.1} ms, then median {:.1} ms \
             (min {:.1}, max {:.1})",
            cold.as_secs_f64() * 1e3,
            warm[5].as_secs_f64() * 1e3,
            warm[0].as_secs_f64() * 1e3,
            warm[9].as_secs_f64() * 1e3
        );
    }

    let tmp = tempfile::tempdir().unwrap();
    let t = Instant::now();
    for i in 0..RUNS {
        let dir = tmp.path().join(format!("bench-{i:04}"));
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::connect(&Store::sqlite_url(&dir.join("store.sqlite")))
            .await
            .unwrap();
        record(&store, i).await;
        store.close().await;
    }
    println!(
        "made {RUNS} run directories in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    let served = Serve::start(tmp.path(), None);
    time(&served.base, "runs directory").await;
    drop(served);

    let Some(pg) = TestPostgres::from_env().unwrap_or_else(|e| panic!("{e}")) else {
        return;
    };
    let store = Store::connect(pg.url()).await.unwrap();
    for i in 0..RUNS {
        record(&store, i).await;
    }
    store.close().await;
    let served = Serve::start_over_store(pg.url());
    time(&served.base, "Postgres").await;
}
