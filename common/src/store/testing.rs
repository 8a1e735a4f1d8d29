//! Test helpers (cargo feature `testing`): a throwaway PostgreSQL cluster, and the policy for
//! picking a Postgres database in tests.
//!
//! Other crates use it as a dev-dependency:
//! `stress-common = { workspace = true, features = ["testing"] }`.
//!
//! [`ThrowawayPostgres`] runs `scripts/throwaway-postgres.sh` (embedded at build time, so it works
//! from any crate's tests): initdb in a temporary directory, 127.0.0.1 on a random free port, the
//! unix socket in that directory, trust authentication, fsync off; the server is stopped and the
//! directory removed on drop. As root the cluster runs as the `postgres` user (initdb refuses
//! root), or as `$THROWAWAY_PG_USER`.
//!
//! [`TestPostgres::from_env`] is the policy: a Postgres test never passes silently without
//! Postgres. It fails when no server can be had, unless `TRITON_STRESS_SKIP_POSTGRES=1`; a skip
//! prints `SKIPPED: <test>: <why>` to stderr past the test harness's capture; and under `CI` a
//! skip request fails too, since CI installs PostgreSQL (scripts/test.sh).

use std::io::Write;
use std::path::Path;
use std::process::Command;

/// The script, shared with the shell users of `scripts/throwaway-postgres.sh`.
const SCRIPT: &str = include_str!("../../../scripts/throwaway-postgres.sh");

/// Set to a Postgres URL to run the Postgres tests against that server instead of a throwaway one.
pub const TEST_DATABASE_URL: &str = "TEST_DATABASE_URL";
/// Set to `1` to skip the Postgres tests (they fail, loudly, when Postgres is not available).
pub const SKIP_POSTGRES: &str = "TRITON_STRESS_SKIP_POSTGRES";
/// Set by CI systems (`CI=true`): there [`SKIP_POSTGRES`] is refused, so that no Postgres test
/// counts as passed in CI without having run.
pub const CI: &str = "CI";

#[derive(Debug, thiserror::Error)]
#[error("throwaway postgres: {0}")]
pub struct ThrowawayError(pub String);

/// A PostgreSQL server in a temporary directory, stopped and removed on drop.
#[derive(Debug)]
pub struct ThrowawayPostgres {
    dir: tempfile::TempDir,
    url: String,
    running: bool,
}

/// Runs the script's `action` on `dir` with `env` (its `THROWAWAY_PG_*` settings).
fn run_script(
    action: &str,
    dir: &Path,
    env: &[(&str, &str)],
) -> Result<std::process::Output, ThrowawayError> {
    let mut command = Command::new("bash");
    command.envs(env.iter().copied());
    command
        .arg("-c")
        .arg(SCRIPT)
        .arg("throwaway-postgres.sh")
        .arg(action)
        .arg(dir)
        .output()
        .map_err(|e| ThrowawayError(format!("cannot run bash: {e}")))
}

impl ThrowawayPostgres {
    /// initdb and start a server (blocks for a few seconds).
    pub fn start() -> Result<Self, ThrowawayError> {
        Self::start_also_listening(None)
    }

    /// Like [`start`](Self::start), and also listening on `ADDR` of `ADDR/PREFIX`, trusting that
    /// subnet: how pods of the test cluster reach it (`url_at(ADDR)`).
    pub fn start_also_listening(also_listen: Option<&str>) -> Result<Self, ThrowawayError> {
        let dir = tempfile::Builder::new()
            .prefix("stress-pg-")
            .tempdir()
            .map_err(|e| ThrowawayError(format!("cannot create a temporary directory: {e}")))?;
        let env: Vec<_> = also_listen
            .map(|cidr| ("THROWAWAY_PG_ALSO_LISTEN", cidr))
            .into_iter()
            .collect();
        let output = run_script("start", dir.path(), &env)?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            return Err(ThrowawayError(format!(
                "{}; set {TEST_DATABASE_URL} to use a running server, or {SKIP_POSTGRES}=1 to \
                 skip the Postgres tests",
                stderr.trim()
            )));
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let url = stdout
            .lines()
            .find_map(|line| line.strip_prefix("DATABASE_URL="))
            .ok_or_else(|| {
                ThrowawayError(format!(
                    "the script printed no DATABASE_URL line: {}",
                    stderr.trim()
                ))
            })?
            .to_string();
        Ok(Self {
            dir,
            url,
            running: true,
        })
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL with another host address (one it also listens on).
    pub fn url_at(&self, address: &str) -> String {
        self.url.replacen("127.0.0.1", address, 1)
    }

    /// The cluster's directory (`data/`, `postgres.log`, the unix socket).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's processes: the postmaster (first line of `data/postmaster.pid`) and its
    /// children (backends, checkpointer, ...).
    fn processes(&self) -> Result<Vec<String>, ThrowawayError> {
        let pid_file = self.dir.path().join("data/postmaster.pid");
        let text = std::fs::read_to_string(&pid_file)
            .map_err(|e| ThrowawayError(format!("{}: {e}", pid_file.display())))?;
        let postmaster = text.lines().next().unwrap_or_default().trim().to_string();
        let children = Command::new("pgrep")
            .args(["-P", &postmaster])
            .output()
            .map_err(|e| ThrowawayError(format!("cannot run pgrep: {e}")))?;
        let mut pids = vec![postmaster];
        pids.extend(
            String::from_utf8_lossy(&children.stdout)
                .split_whitespace()
                .map(str::to_string),
        );
        Ok(pids)
    }

    /// Sends `signal` (`STOP`, `CONT`, `KILL`, ...) to every process of the server: the
    /// postmaster must get it; a backend may have ended meanwhile (its connection closed).
    pub fn signal(&self, signal: &str) -> Result<(), ThrowawayError> {
        let pids = self.processes()?;
        for (i, pid) in pids.iter().enumerate() {
            let status = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(pid)
                .stderr(std::process::Stdio::null())
                .status()
                .map_err(|e| ThrowawayError(format!("cannot run kill: {e}")))?;
            if i == 0 && !status.success() {
                return Err(ThrowawayError(format!(
                    "kill -{signal} {pid} (the postmaster): {status}"
                )));
            }
        }
        Ok(())
    }

    /// A hung store: every process of the server stops (connections stay open, nothing
    /// answers) until [`Self::resume`].
    pub fn pause(&self) -> Result<(), ThrowawayError> {
        self.signal("STOP")
    }

    pub fn resume(&self) -> Result<(), ThrowawayError> {
        self.signal("CONT")
    }

    /// A crashed store: every process of the server SIGKILLed at once.
    pub fn kill(&mut self) -> Result<(), ThrowawayError> {
        self.signal("KILL")?;
        self.running = false;
        Ok(())
    }

    /// Starts the server again on its port, with its data (after [`Self::kill`] or a stop).
    pub fn restart(&mut self) -> Result<(), ThrowawayError> {
        let port = self
            .url
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split('/').next())
            .unwrap_or_default()
            .to_string();
        let output = run_script("start", self.dir.path(), &[("THROWAWAY_PG_PORT", &port)])?;
        if !output.status.success() {
            return Err(ThrowawayError(format!(
                "restart on port {port}: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        self.running = true;
        Ok(())
    }

    /// Stops the server now (drop does it too, ignoring errors).
    pub fn stop(mut self) -> Result<(), ThrowawayError> {
        self.stop_server()
    }

    fn stop_server(&mut self) -> Result<(), ThrowawayError> {
        if !self.running {
            return Ok(());
        }
        self.running = false;
        // A paused server (see `pause`) cannot stop.
        let _ = self.signal("CONT");
        let output = run_script("stop", self.dir.path(), &[])?;
        if output.status.success() {
            Ok(())
        } else {
            Err(ThrowawayError(
                String::from_utf8_lossy(&output.stderr).trim().to_string(),
            ))
        }
    }
}

impl Drop for ThrowawayPostgres {
    fn drop(&mut self) {
        if let Err(e) = self.stop_server() {
            eprintln!("{e}");
        }
    }
}

/// The Postgres database a test runs against.
#[derive(Debug)]
pub enum TestPostgres {
    /// From `TEST_DATABASE_URL`: shared, so tests must use unique ids.
    External(String),
    /// Our own, fresh and empty.
    Throwaway(ThrowawayPostgres),
}

/// Where a Postgres test gets its database: [`source`]'s decision.
#[derive(Debug, PartialEq, Eq)]
enum Source {
    External(String),
    /// Skipped on request; the reason, for the SKIPPED line.
    Skip(String),
    Throwaway,
}

/// Whether an environment flag is on: set, and neither empty, `0` nor `false`.
fn is_on(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        let v = v.trim();
        !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false")
    })
}

/// The policy, from the environment (`var` reads a variable): `TEST_DATABASE_URL` when set; a
/// skip when `TRITON_STRESS_SKIP_POSTGRES=1`, but an error under `CI`; else a throwaway server.
fn source(var: impl Fn(&str) -> Option<String>) -> Result<Source, String> {
    if let Some(url) = var(TEST_DATABASE_URL).filter(|url| !url.trim().is_empty()) {
        return Ok(Source::External(url));
    }
    if var(SKIP_POSTGRES).is_some_and(|v| v.trim() == "1") {
        if let Some(ci) = var(CI).filter(|ci| is_on(Some(ci))) {
            return Err(format!(
                "{SKIP_POSTGRES}=1 is refused under {CI}={ci}: CI must run the Postgres tests \
                 (scripts/test.sh installs PostgreSQL), or give {TEST_DATABASE_URL}"
            ));
        }
        return Ok(Source::Skip(format!("{SKIP_POSTGRES}=1")));
    }
    Ok(Source::Throwaway)
}

/// The running test's name: libtest runs each test on a thread named after it.
fn current_test() -> String {
    std::thread::current()
        .name()
        .filter(|name| *name != "main")
        .unwrap_or("a Postgres test")
        .to_string()
}

impl TestPostgres {
    /// `TEST_DATABASE_URL` when set; else `Ok(None)` when `TRITON_STRESS_SKIP_POSTGRES=1`, after
    /// printing `SKIPPED: <test>: <why>` to stderr (an error instead under `CI`); else a fresh
    /// [`ThrowawayPostgres`], or an error saying why there is none (e.g. no binaries). A test
    /// should fail on an error, not pass silently.
    pub fn from_env() -> Result<Option<TestPostgres>, ThrowawayError> {
        let test = current_test();
        match source(|name| std::env::var(name).ok()) {
            Err(refused) => Err(ThrowawayError(format!("{test}: {refused}"))),
            Ok(Source::External(url)) => Ok(Some(TestPostgres::External(url))),
            Ok(Source::Skip(why)) => {
                // Straight to the stderr handle: the harness captures eprintln! of a passing
                // test, and a skip must be seen.
                writeln!(std::io::stderr(), "SKIPPED: {test}: {why}").ok();
                Ok(None)
            }
            Ok(Source::Throwaway) => {
                ThrowawayPostgres::start().map(|pg| Some(TestPostgres::Throwaway(pg)))
            }
        }
    }

    pub fn url(&self) -> &str {
        match self {
            TestPostgres::External(url) => url,
            TestPostgres::Throwaway(pg) => pg.url(),
        }
    }

    /// Whether the database is ours alone (then a test may expect it to hold only its own rows).
    pub fn is_fresh(&self) -> bool {
        matches!(self, TestPostgres::Throwaway(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source_with(vars: &[(&str, &str)]) -> Result<Source, String> {
        source(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn a_throwaway_server_unless_told_otherwise() {
        assert_eq!(source_with(&[]), Ok(Source::Throwaway));
        assert_eq!(source_with(&[(CI, "true")]), Ok(Source::Throwaway));
        assert_eq!(
            source_with(&[(TEST_DATABASE_URL, " "), (SKIP_POSTGRES, "0")]),
            Ok(Source::Throwaway)
        );
    }

    #[test]
    fn a_given_url_wins_even_over_a_skip() {
        let url = "postgres://u@db:5432/t";
        for vars in [
            &[(TEST_DATABASE_URL, url)][..],
            &[(TEST_DATABASE_URL, url), (SKIP_POSTGRES, "1"), (CI, "true")],
        ] {
            assert_eq!(
                source_with(vars),
                Ok(Source::External(url.into())),
                "{vars:?}"
            );
        }
    }

    #[test]
    fn a_skip_is_honoured_outside_ci_and_refused_in_ci() {
        let skip = Ok(Source::Skip("TRITON_STRESS_SKIP_POSTGRES=1".into()));
        assert_eq!(source_with(&[(SKIP_POSTGRES, "1")]), skip);
        for ci in ["", "0", "false", "FALSE"] {
            assert_eq!(
                source_with(&[(SKIP_POSTGRES, "1"), (CI, ci)]),
                skip,
                "CI={ci}"
            );
        }
        for ci in ["true", "1", "yes"] {
            let refused = source_with(&[(SKIP_POSTGRES, "1"), (CI, ci)]).unwrap_err();
            assert_eq!(
                refused,
                format!(
                    "TRITON_STRESS_SKIP_POSTGRES=1 is refused under CI={ci}: CI must run the \
                     Postgres tests (scripts/test.sh installs PostgreSQL), or give \
                     TEST_DATABASE_URL"
                )
            );
        }
    }

    /// Postgres starts when any one of its listen addresses binds. A port that some client socket
    /// holds on 127.0.0.1 (bound, not listening: invisible to a connect probe) but free on the
    /// other address must not make a "started" server whose URL refuses connections, as it once
    /// did in CI (the driver then timed out connecting).
    #[test]
    fn a_port_taken_on_one_listen_address_is_not_a_started_server() {
        // A client connection's local port: bound on 127.0.0.1, not listening.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let held = client.local_addr().unwrap().port();
        let dir = tempfile::Builder::new()
            .prefix("stress-pg-")
            .tempdir()
            .unwrap();
        let port = held.to_string();
        let output = run_script(
            "start",
            dir.path(),
            &[
                ("THROWAWAY_PG_ALSO_LISTEN", "127.0.0.2/32"),
                ("THROWAWAY_PG_PORT", &port),
                ("THROWAWAY_PG_ATTEMPTS", "2"),
            ],
        )
        .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let started = output.status.success();
        if started {
            let _ = run_script("stop", dir.path(), &[]);
        }
        drop((client, listener));
        assert!(!started, "started on a port taken on 127.0.0.1: {stderr}");
        assert!(
            stderr.contains(&format!("port {port} is taken")),
            "{stderr}"
        );
    }

    /// The name the SKIPPED line gives, also when tests run one at a time.
    #[test]
    fn the_test_name_is_the_thread_name() {
        assert_eq!(
            current_test(),
            "store::testing::tests::the_test_name_is_the_thread_name"
        );
    }
}
