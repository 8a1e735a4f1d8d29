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

use std::path::Path;
use std::process::Command;

/// The script, shared with the shell users of `scripts/throwaway-postgres.sh`.
const SCRIPT: &str = include_str!("../../../scripts/throwaway-postgres.sh");

/// Set to a Postgres URL to run the Postgres tests against that server instead of a throwaway one.
pub const TEST_DATABASE_URL: &str = "TEST_DATABASE_URL";
/// Set to `1` to skip the Postgres tests (they fail, loudly, when Postgres is not available).
pub const SKIP_POSTGRES: &str = "TRITON_STRESS_SKIP_POSTGRES";

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

fn run_script(
    action: &str,
    dir: &Path,
    also_listen: Option<&str>,
) -> Result<std::process::Output, ThrowawayError> {
    let mut command = Command::new("bash");
    if let Some(cidr) = also_listen {
        command.env("THROWAWAY_PG_ALSO_LISTEN", cidr);
    }
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
        let output = run_script("start", dir.path(), also_listen)?;
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

    /// Stops the server now (drop does it too, ignoring errors).
    pub fn stop(mut self) -> Result<(), ThrowawayError> {
        self.stop_server()
    }

    fn stop_server(&mut self) -> Result<(), ThrowawayError> {
        if !self.running {
            return Ok(());
        }
        self.running = false;
        let output = run_script("stop", self.dir.path(), None)?;
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

impl TestPostgres {
    /// `TEST_DATABASE_URL` when set; else `Ok(None)` when `TRITON_STRESS_SKIP_POSTGRES=1`; else a
    /// fresh [`ThrowawayPostgres`], or an error saying why there is none (e.g. no binaries). A
    /// test should fail on that error, not pass silently.
    pub fn from_env() -> Result<Option<TestPostgres>, ThrowawayError> {
        if let Ok(url) = std::env::var(TEST_DATABASE_URL)
            && !url.trim().is_empty()
        {
            return Ok(Some(TestPostgres::External(url)));
        }
        if std::env::var(SKIP_POSTGRES).is_ok_and(|v| v.trim() == "1") {
            eprintln!("{SKIP_POSTGRES}=1: skipping a Postgres test");
            return Ok(None);
        }
        ThrowawayPostgres::start().map(|pg| Some(TestPostgres::Throwaway(pg)))
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
