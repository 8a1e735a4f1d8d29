//! Helpers shared by the driver's integration tests (e2e, html, junit): where the repository is,
//! the worker built beside the driver under test, pids in the driver's events, and the JUnit
//! schema check (xmllint against Jenkins xunit's junit-10.xsd), and `driver serve` on a free port.
// Each test binary uses its own subset of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("driver/ is inside the repository")
        .to_path_buf()
}

/// Makes sure the `worker` beside the driver under test exists and is up to date.
///
/// The local launcher resolves `worker: { binary: auto }` to the `worker` in the driver
/// executable's directory first, then to PATH. `cargo test -p driver` builds only this package's
/// binaries, so that sibling may be missing or stale (left by an older build). Putting a fresh
/// worker on PATH would not help: a stale sibling wins. So build the worker package with the same
/// cargo into the same target directory, profile and target triple as the driver under test:
/// cargo brings the sibling up to date (a no-op when it is), it lands exactly where the launcher
/// looks, and the test matrices keep `binary: auto` like the committed ones. The nested cargo
/// does not wait on the outer one: `cargo test` holds no lock while tests run.
pub fn ensure_worker() -> PathBuf {
    static WORKER_BIN: OnceLock<PathBuf> = OnceLock::new();
    WORKER_BIN
        .get_or_init(|| {
            let driver = Path::new(env!("CARGO_BIN_EXE_driver"));
            // <target>/[<triple>/]<profile dir>/driver
            let out_dir = driver.parent().expect("the driver is in a directory");
            let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .parent()
                .expect("CARGO_TARGET_TMPDIR is <target>/tmp");
            let profile = match out_dir.file_name().and_then(|n| n.to_str()) {
                Some("debug") => "dev",
                Some(other) => other,
                None => panic!("unexpected driver path {}", driver.display()),
            };
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut build = Command::new(cargo);
            build
                .args([
                    "build",
                    "-p",
                    "worker",
                    "--bin",
                    "worker",
                    "--profile",
                    profile,
                ])
                .arg("--target-dir")
                .arg(target_dir)
                .current_dir(repo_root());
            let triple_dir = out_dir.parent().expect("a profile directory has a parent");
            if triple_dir.canonicalize().ok() != target_dir.canonicalize().ok() {
                build
                    .arg("--target")
                    .arg(triple_dir.file_name().expect("a target triple"));
            }
            eprintln!("building the worker beside the driver: {build:?}");
            let out = build.output().expect("cargo runs");
            assert!(
                out.status.success(),
                "building the worker failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let worker = out_dir.join("worker");
            assert!(
                worker.is_file(),
                "cargo built the worker, but not at {} where the local launcher looks",
                worker.display()
            );
            worker
        })
        .clone()
}

/// The pid in an event's details: `ready (pid 123; grpc ...)`, `launched (pid 456)`.
pub fn pid_in(details: &str) -> Option<u32> {
    let rest = &details[details.find("(pid ")? + 5..];
    rest[..rest.find(|c: char| !c.is_ascii_digit())?]
        .parse()
        .ok()
}

/// junit-10.xsd as `scripts/install-junit-schema.sh` installs it (or `TRITON_STRESS_JUNIT_XSD`).
pub fn junit_xsd() -> PathBuf {
    let xsd = std::env::var_os("TRITON_STRESS_JUNIT_XSD")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".local/share/junit-10.xsd"));
    assert!(
        xsd.is_file(),
        "{} is missing: run scripts/install-junit-schema.sh (scripts/test.sh does)",
        xsd.display()
    );
    xsd
}

/// What xmllint says of `xml` against junit-10.xsd: Ok, or its complaint.
pub fn junit_schema_check(xml: &str) -> Result<(), String> {
    use std::io::Write;
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    file.write_all(xml.as_bytes()).expect("write the XML");
    let out = Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(junit_xsd())
        .arg(file.path())
        .output()
        .expect("xmllint runs (scripts/install-junit-schema.sh installs it)");
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Asserts that `xml` validates against junit-10.xsd and returns (suite name, test case name,
/// failure message) of every failed test case.
pub fn assert_junit(xml: &str) -> Vec<(String, String, String)> {
    use quick_xml::events::Event;
    if let Err(why) = junit_schema_check(xml) {
        panic!("junit.xml does not validate against junit-10.xsd:\n{why}\n{xml}");
    }
    let attr = |e: &quick_xml::events::BytesStart, key: &str| {
        e.attributes()
            .flatten()
            .find(|a| a.key.as_ref() == key.as_bytes())
            .map(|a| a.unescape_value().unwrap().into_owned())
            .unwrap_or_default()
    };
    let mut reader = quick_xml::Reader::from_str(xml);
    let (mut suite, mut case) = (String::new(), String::new());
    let mut failed = Vec::new();
    loop {
        match reader.read_event().unwrap() {
            Event::Eof => break,
            Event::Start(e) | Event::Empty(e) => match e.name().as_ref() {
                b"testsuite" => suite = attr(&e, "name"),
                b"testcase" => case = attr(&e, "name"),
                b"failure" => failed.push((suite.clone(), case.clone(), attr(&e, "message"))),
                _ => {}
            },
            _ => {}
        }
    }
    failed
}

/// `driver serve --listen 127.0.0.1:0` over a runs directory, killed when dropped.
/// The driver that serves: the one under test, or `TRITON_STRESS_BENCH_DRIVER` (a release
/// build, for the serve benchmark).
fn serve_binary() -> PathBuf {
    std::env::var_os("TRITON_STRESS_BENCH_DRIVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_driver")))
}

pub struct Serve {
    child: std::process::Child,
    pub base: String,
}

impl Serve {
    pub fn start(runs: &Path, token: Option<&str>) -> Self {
        let mut command = Command::new(serve_binary());
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--runs-dir"])
            .arg(runs)
            .env_remove("DATABASE_URL");
        Self::spawn(command, token)
    }

    /// Over one store (`DATABASE_URL`, from the environment as in deploy/).
    pub fn start_over_store(url: &str) -> Self {
        let mut command = Command::new(serve_binary());
        command
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("DATABASE_URL", url);
        Self::spawn(command, None)
    }

    fn spawn(mut command: Command, token: Option<&str>) -> Self {
        use std::io::BufRead;
        command
            .env_remove("TRITON_STRESS_SERVE_TOKEN")
            .stdout(std::process::Stdio::piped());
        if let Some(t) = token {
            command.env("TRITON_STRESS_SERVE_TOKEN", t);
        }
        let mut child = command.spawn().expect("driver serve starts");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .trim()
            .strip_prefix("serving on ")
            .unwrap_or_else(|| panic!("not the serve line: {line:?}"))
            .trim_end_matches('/')
            .to_string();
        Serve { child, base }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn get(url: &str) -> stress_common::http::Response {
    stress_common::http::get(url, std::time::Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}
