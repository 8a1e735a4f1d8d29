//! A foreign client program supervised by the worker (interface 1, docs/clients.md): the worker
//! starts it with its assignment, reads its records from stdout into the same counts, failure
//! records and outages as its own scenarios, and stops it when the run's time is up. Whatever
//! breaks the interface (a line it does not allow, a non-zero exit, silence) is the program's
//! failure, said with its own words: the offending line or the tail of its stderr.

use crate::config::{ClientProgram, WorkerConfig};
use crate::stats::{ScenarioKey, Stats};
use futures::StreamExt;
use std::collections::{BTreeSet, VecDeque};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stress_common::foreign::{
    ASSIGNMENT_ENV, Assignment, BadLine, CorrelationIds, Failed, Hello, INTERFACE, MAX_LINE_BYTES,
    Passed, Record,
};
use stress_common::status::{FailureRecord, StatusSink};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};
use tokio_util::sync::CancellationToken;

/// How long a stopped program may take to write its last records and exit (after SIGTERM).
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How many lines of the program's stderr a failure quotes.
const STDERR_TAIL: usize = 20;

/// How the program ended, as the run's outcome sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It ran to its end (or until stopped) within the interface.
    Finished { hello: Option<Hello> },
    /// It broke the interface or failed on its own: why, in words.
    Failed(String),
}

/// What the supervisor needs of the worker's run.
pub struct Supervised<'a> {
    pub config: &'a WorkerConfig,
    pub program: &'a ClientProgram,
    pub stats: &'a Stats,
    pub sink: &'a dyn StatusSink,
}

/// The program's assignment from the worker's configuration.
pub fn assignment(config: &WorkerConfig, program: &ClientProgram) -> Assignment {
    use stress_common::contract::LoadMode;
    // A rate is the open loop's; a closed loop's width is the worker's stream count.
    let rate = match &config.settings.load_mode {
        LoadMode::Rate(r) | LoadMode::Poisson(r) => Some(*r),
        LoadMode::Concurrency(_) | LoadMode::Intervals(_) => None,
    };
    Assignment {
        interface: INTERFACE,
        member: config.member.clone().unwrap_or_else(|| "worker".into()),
        servers: config.servers.clone(),
        protocol: config.protocol.as_str().into(),
        models: program.models.clone(),
        duration_s: config.duration.map(|d| d.as_secs_f64()),
        seed: config.seed,
        concurrency: config.concurrency as u32,
        rate,
        correlation_ids: Some(CorrelationIds {
            first: config.corr_ids.base,
            count: config.corr_ids.size,
        }),
    }
}

/// Runs the program until it ends or `stop` fires, feeding its records into the run.
pub async fn supervise(run: Supervised<'_>, stop: CancellationToken) -> Outcome {
    let assignment = assignment(run.config, run.program);
    let file = match write_assignment(&assignment) {
        Ok(f) => f,
        Err(e) => return Outcome::Failed(format!("the client's assignment not written: {e}")),
    };
    let argv = run.program.command.argv();
    let mut child = match start(run.program, &assignment, file.path()) {
        Ok(c) => c,
        Err(e) => {
            return Outcome::Failed(format!("client program {argv:?} did not start: {e}"));
        }
    };
    tracing::info!("client program {argv:?} started (pid {:?})", child.id());
    let stderr = keep_stderr_tail(&mut child);
    let stdout = child.stdout.take().expect("stdout is piped");
    let silence = silence_limit(run.config);
    let read = read_records(&run, stdout, child.id(), silence, stop.clone());
    let (read, stopped) = read.await;
    let status = end(&mut child, stopped || read.is_err()).await;
    let tail = stderr.words().await;
    match (read, status) {
        (Err(why), _) => Outcome::Failed(format!("{why}{tail}")),
        (Ok(hello), Ok(status)) if status.success() || stopped && killed_by_us(status) => {
            Outcome::Finished { hello }
        }
        (Ok(_), Ok(status)) => Outcome::Failed(format!("client program exited: {status}{tail}")),
        (Ok(_), Err(e)) => Outcome::Failed(format!("client program not waited for: {e}{tail}")),
    }
}

/// How long the program may write no record before it is taken for hung: ten polls, at least
/// 30 s (a test may be slow, a sequence long).
fn silence_limit(config: &WorkerConfig) -> Duration {
    (config.poll_interval * 10).max(Duration::from_secs(30))
}

fn write_assignment(a: &Assignment) -> std::io::Result<tempfile::NamedTempFile> {
    let mut file = tempfile::Builder::new()
        .prefix("triton-stress-assignment-")
        .suffix(".json")
        .tempfile()?;
    serde_json::to_writer_pretty(&mut file, a)?;
    Ok(file)
}

fn start(
    program: &ClientProgram,
    assignment: &Assignment,
    file: &std::path::Path,
) -> std::io::Result<Child> {
    let argv = program.command.argv();
    // Dies with the worker: a worker killed outright (SIGKILL, the OOM killer) runs no drop,
    // and a client left behind would go on loading the servers after the run.
    let mut command = stress_common::shutdown::command_dying_with_parent(resolve(&argv[0])?);
    command
        .args(&argv[1..])
        .envs(assignment.env())
        .env(ASSIGNMENT_ENV, file)
        .envs(program.env.iter().map(|e| (&e.name, &e.value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: the stop reaches whatever it started (a shell's children).
        .process_group(0)
        .kill_on_drop(true);
    command.spawn()
}

/// The program to start, as the spawn would find it: started through `setpriv` (see
/// [`stress_common::shutdown::command_dying_with_parent`]), a program that is not there would
/// otherwise start and exit 127 instead of failing to start.
fn resolve(program: &str) -> std::io::Result<std::path::PathBuf> {
    let found = if program.contains('/') {
        Some(std::path::PathBuf::from(program)).filter(|p| p.is_file())
    } else {
        stress_common::paths::find_on_path(program)
    };
    found.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such program"))
}

/// The program's stderr as it is read: its last [`STDERR_TAIL`] lines, and the reader.
struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl StderrTail {
    /// The tail, once the reader has had up to a second after the exit to reach the end.
    async fn words(mut self) -> String {
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
        }
        stderr_tail(&self.lines)
    }
}

/// Logs the program's stderr line by line and keeps its last [`STDERR_TAIL`] lines.
fn keep_stderr_tail(child: &mut Child) -> StderrTail {
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    let mut reader = None;
    if let Some(stderr) = child.stderr.take() {
        let kept = tail.clone();
        reader = Some(tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(target: "client", "{line}");
                let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
                if kept.len() == STDERR_TAIL {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        }));
    }
    StderrTail {
        lines: tail,
        reader,
    }
}

fn stderr_tail(tail: &Mutex<VecDeque<String>>) -> String {
    let lines = tail.lock().unwrap_or_else(|e| e.into_inner());
    if lines.is_empty() {
        return "; its stderr is empty".into();
    }
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    format!("; its stderr ended:\n{}", lines.join("\n"))
}

/// Reads records until stdout closes, `stop` fires (then the program gets SIGTERM and
/// [`STOP_GRACE`] to write its last ones), a line breaks the interface or the program is
/// silent too long. Returns the program's hello (or why it failed) and whether the stop came.
async fn read_records(
    run: &Supervised<'_>,
    stdout: impl tokio::io::AsyncRead + Unpin,
    pid: Option<u32>,
    silence: Duration,
    stop: CancellationToken,
) -> (Result<Option<Hello>, String>, bool) {
    let codec = LinesCodec::new_with_max_length(MAX_LINE_BYTES);
    let mut lines = FramedRead::new(stdout, codec);
    let mut reader = Reader::new();
    let mut stopped: Option<tokio::time::Instant> = None;
    loop {
        let limit = match stopped {
            Some(deadline) => deadline.saturating_duration_since(tokio::time::Instant::now()),
            None => silence,
        };
        let next = tokio::select! {
            next = tokio::time::timeout(limit, lines.next()) => next,
            _ = stop.cancelled(), if stopped.is_none() => {
                signal_group(pid, nix::sys::signal::Signal::SIGTERM);
                stopped = Some(tokio::time::Instant::now() + STOP_GRACE);
                continue;
            }
        };
        let stopped_yet = stopped.is_some();
        let line = match next {
            Ok(Some(Ok(line))) => line,
            Ok(None) => return (Ok(reader.hello), stopped_yet),
            Ok(Some(Err(LinesCodecError::MaxLineLengthExceeded))) => {
                let why = format!("client program wrote a line longer than {MAX_LINE_BYTES} bytes");
                return (Err(why), stopped_yet);
            }
            Ok(Some(Err(LinesCodecError::Io(e)))) => {
                let why = format!("client program's stdout not read: {e}");
                return (Err(why), stopped_yet);
            }
            Err(_) if stopped_yet => return (Ok(reader.hello), stopped_yet),
            Err(_) => {
                let why = format!("client program wrote no record for {}s", silence.as_secs());
                return (Err(why), stopped_yet);
            }
        };
        if let Err(bad) = reader.take(run, &line).await {
            let why = format!("client program broke the interface: {bad}");
            return (Err(why), stopped_yet);
        }
    }
}

/// The most scenarios a program may name: each is a row of its member's counts, in the report
/// and in the store.
const MAX_SCENARIOS: usize = 64;

/// What the reading of a program's stdout has seen so far.
struct Reader {
    hello: Option<Hello>,
    /// The number of the last line read (1-based).
    number: u64,
    /// When the reading began: no latency is longer than the program has run.
    started: std::time::Instant,
    scenarios: BTreeSet<String>,
}

impl Reader {
    fn new() -> Self {
        Reader {
            hello: None,
            number: 0,
            started: std::time::Instant::now(),
            scenarios: BTreeSet::new(),
        }
    }

    /// Takes one line into the run, or says why interface 1 does not allow it.
    async fn take(&mut self, run: &Supervised<'_>, line: &str) -> Result<(), BadLine> {
        self.number += 1;
        let record = Record::parse(line, self.number)?;
        let number = self.number;
        let bad = |error: &str| BadLine::new(number, line, error);
        match record {
            Record::Hello(h) if self.hello.is_some() => {
                Err(bad(&format!("a second hello ({})", h.client)))
            }
            Record::Hello(h) => {
                tracing::info!("client program is {}", h.label());
                run.stats.client_program(&h);
                self.hello = Some(h);
                Ok(())
            }
            _ if self.hello.is_none() => Err(bad("the first record must be a hello")),
            Record::Pass(p) => {
                self.check(run, &p.scenario, &p.server, &p.latencies_us)
                    .map_err(|e| bad(&e))?;
                passed(run.stats, &p);
                Ok(())
            }
            Record::Fail(f) => {
                self.check(run, &f.scenario, &f.server, &f.latencies_us)
                    .map_err(|e| bad(&e))?;
                failed(run, f).await;
                Ok(())
            }
            Record::Skip(s) => {
                self.check(run, &s.scenario, "", &[]).map_err(|e| bad(&e))?;
                run.stats.test_skipped(ScenarioKey::Foreign(&s.scenario));
                Ok(())
            }
        }
    }

    /// What a record must be beyond its line's form: at most [`MAX_SCENARIOS`] scenarios in
    /// all, its server one of the assignment's, its latencies no longer than the program has
    /// run (a second more for the clocks' steps).
    fn check(
        &mut self,
        run: &Supervised<'_>,
        scenario: &str,
        server: &str,
        latencies_us: &[u64],
    ) -> Result<(), String> {
        if !self.scenarios.contains(scenario) {
            if self.scenarios.len() == MAX_SCENARIOS {
                return Err(format!("a scenario more than the {MAX_SCENARIOS} allowed"));
            }
            self.scenarios.insert(scenario.to_string());
        }
        let servers = &run.config.servers;
        if !server.is_empty() && !servers.iter().any(|s| s == server) {
            return Err(format!(
                "server {server:?} is not one of the assignment's ({})",
                servers.join(", ")
            ));
        }
        let ran = self.started.elapsed() + Duration::from_secs(1);
        match latencies_us
            .iter()
            .max()
            .map(|us| Duration::from_micros(*us))
        {
            Some(latency) if latency > ran => Err(format!(
                "a latency of {latency:?}, longer than the program has run ({ran:?})"
            )),
            _ => Ok(()),
        }
    }
}

fn requests(stats: &Stats, scenario: &str, model: &str, server: &str, latencies_us: &[u64]) {
    for us in latencies_us {
        let latency = Some(Duration::from_micros(*us));
        stats.request(ScenarioKey::Foreign(scenario), model, server, latency);
    }
}

fn passed(stats: &Stats, p: &Passed) {
    requests(stats, &p.scenario, &p.model, &p.server, &p.latencies_us);
    stats.test_passed(ScenarioKey::Foreign(&p.scenario), &p.model);
    if !p.server.is_empty() {
        stats.server_answered(&p.server, stress_common::now_ms());
    }
}

async fn failed(run: &Supervised<'_>, f: Failed) {
    requests(run.stats, &f.scenario, &f.model, &f.server, &f.latencies_us);
    let record = FailureRecord {
        at_ms: stress_common::now_ms(),
        scenario: f.scenario,
        server: f.server,
        model: f.model,
        correlation_id: f.correlation_id,
        // A failure that checked no answer (a transport error, a refusal) expected success.
        expected: match f.expected.is_empty() {
            true => "success".into(),
            false => f.expected,
        },
        actual: f.message,
        error_kind: Some(f.error_kind),
        forensics: None,
    };
    if !record.server.is_empty() {
        let sequence = record.correlation_id.is_some();
        run.stats
            .server_failed(&record.server, record.at_ms, sequence);
    }
    tracing::warn!("{record}");
    let key = ScenarioKey::Foreign(&record.scenario);
    if run.stats.test_failed(key, &record)
        && let Err(e) = run.sink.failure(&record).await
    {
        tracing::warn!("failure not recorded: {e}");
    }
}

/// Ends the program: when `stop`, SIGTERM to its group (again, for a program stopped for
/// breaking the interface), then SIGKILL after [`STOP_GRACE`]; else waits for its own exit.
async fn end(child: &mut Child, stop: bool) -> std::io::Result<ExitStatus> {
    use nix::sys::signal::Signal;
    if stop {
        signal_group(child.id(), Signal::SIGTERM);
        if let Ok(status) = tokio::time::timeout(STOP_GRACE, child.wait()).await {
            return status;
        }
        signal_group(child.id(), Signal::SIGKILL);
    }
    child.wait().await
}

/// Signals the program's process group (it leads its own; see `start`).
fn signal_group(pid: Option<u32>, signal: nix::sys::signal::Signal) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(-pid), signal);
    }
}

/// Ended by the stop the worker sent (SIGTERM, or SIGKILL past its grace; a shell reports
/// 128 + the signal).
fn killed_by_us(status: ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    matches!(status.signal(), Some(15 | 9)) || matches!(status.code(), Some(143 | 137))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use tokio::io::AsyncWriteExt;

    const HELLO: &str = r#"{"type":"hello","interface":1,"client":"test","version":"1"}"#;
    const PASS: &str = r#"{"type":"pass","scenario":"Mine","latencies_us":[1500]}"#;

    fn config() -> WorkerConfig {
        let cli = crate::config::Cli::try_parse_from([
            "worker",
            "--servers",
            "h:1",
            "--client-command",
            r#"["my-client"]"#,
        ])
        .unwrap();
        cli.run.into_config().unwrap()
    }

    #[test]
    fn the_silence_limit_is_ten_polls_and_at_least_30_s() {
        let mut c = config();
        c.poll_interval = Duration::from_secs(1);
        assert_eq!(silence_limit(&c), Duration::from_secs(30));
        c.poll_interval = Duration::from_secs(5);
        assert_eq!(silence_limit(&c), Duration::from_secs(50));
    }

    /// The reader's answer (under a `silence` limit) to what `feed` writes on the program's
    /// stdout: the stream closes when `feed` drops it.
    async fn read_fed<F: std::future::Future<Output = ()>>(
        silence: Duration,
        feed: impl FnOnce(tokio::io::DuplexStream) -> F,
    ) -> Result<Option<Hello>, String> {
        let config = config();
        let program = config.client.clone().expect("a client program");
        let stats = Stats::default();
        let sink = stress_common::status::NoopSink;
        let run = Supervised {
            config: &config,
            program: &program,
            stats: &stats,
            sink: &sink,
        };
        let (program_side, stdout) = tokio::io::duplex(1 << 16);
        let writer = async move {
            feed(program_side).await;
            std::future::pending::<()>().await
        };
        let reader = read_records(&run, stdout, None, silence, CancellationToken::new());
        let answer = tokio::time::timeout(Duration::from_secs(60), async {
            tokio::select! {
                (answer, _) = reader => answer,
                () = writer => unreachable!("the writer never ends"),
            }
        });
        answer
            .await
            .unwrap_or_else(|_| Err("the reader's minute ended first".into()))
    }

    /// Feeds `lines`, each `gap` after the one before, then falls silent with its stdout still
    /// open (a hung program): the reader's answer under a `silence` limit.
    async fn read(
        lines: &[&str],
        gap: Duration,
        silence: Duration,
    ) -> Result<Option<Hello>, String> {
        let lines: Vec<String> = lines.iter().map(|l| format!("{l}\n")).collect();
        read_fed(silence, |mut program_side| async move {
            for line in lines {
                tokio::time::sleep(gap).await;
                program_side.write_all(line.as_bytes()).await.unwrap();
            }
            std::future::pending::<()>().await
        })
        .await
    }

    /// A program that stops writing records, its process still there, is taken for hung once
    /// it has been silent for the limit, and fails in those words; one that writes within the
    /// limit is not, however long it runs.
    #[tokio::test]
    async fn a_program_silent_past_its_limit_fails_as_hung_and_a_steady_one_does_not() {
        let limit = Duration::from_millis(400);
        let started = tokio::time::Instant::now();
        let answer = read(&[HELLO, PASS], Duration::from_millis(10), limit).await;
        assert_eq!(answer.unwrap_err(), "client program wrote no record for 0s");
        assert!(started.elapsed() >= limit);
        // Six records 200 ms apart (1.2 s, three times the limit) before falling silent.
        let started = tokio::time::Instant::now();
        let steady = [HELLO, PASS, PASS, PASS, PASS, PASS];
        let answer = read(&steady, Duration::from_millis(200), limit).await;
        assert!(answer.is_err());
        assert!(
            started.elapsed() >= Duration::from_millis(6 * 200) + limit,
            "judged silent while it wrote: {:?}",
            started.elapsed()
        );
    }

    /// Feeds `lines` at once and closes the program's stdout: the reader's answer.
    async fn read_all(lines: &[String]) -> Result<Option<Hello>, String> {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        read_fed(Duration::from_secs(30), |mut program_side| async move {
            let _ = program_side.write_all(text.as_bytes()).await;
        })
        .await
    }

    fn pass(scenario: &str, server: &str, latency_us: u64) -> String {
        format!(
            r#"{{"type":"pass","scenario":"{scenario}","server":"{server}","latencies_us":[{latency_us}]}}"#
        )
    }

    /// A record whose server is not one of the assignment's, whose latency is longer than the
    /// program has run, or whose scenario is one too many breaks the interface, in those words;
    /// the same records within bounds (the twin) are taken.
    #[tokio::test]
    async fn a_record_must_name_an_assigned_server_a_possible_latency_and_few_scenarios() {
        // 64 scenarios: Load and S0 to S62.
        let many: Vec<String> = std::iter::once("Load".to_string())
            .chain((0..63).map(|i| format!("S{i}")))
            .map(|scenario| pass(&scenario, "h:1", 500))
            .collect();
        let mut healthy = vec![HELLO.to_string(), pass("Load", "h:1", 900_000)];
        healthy.extend(many.iter().cloned());
        assert!(read_all(&healthy).await.is_ok());
        for (record, said) in [
            (
                pass("Load", "10.0.0.1:1", 500),
                r#"server "10.0.0.1:1" is not one of the assignment's (h:1)"#,
            ),
            (
                pass("Load", "h:1", 10_000_000),
                "a latency of 10s, longer than the program has run",
            ),
            (
                pass("S63", "h:1", 500),
                "a scenario more than the 64 allowed",
            ),
        ] {
            let mut lines = vec![HELLO.to_string()];
            lines.extend(many.iter().cloned());
            lines.push(record);
            let why = read_all(&lines).await.unwrap_err();
            assert!(
                why.starts_with("client program broke the interface: line 66 ")
                    && why.contains(said),
                "{said}: {why}"
            );
        }
    }

    /// A line past the limit ends the reading (the worker's memory is not the program's to
    /// fill); a long line within it is read.
    #[tokio::test]
    async fn a_line_longer_than_the_limit_breaks_the_interface() {
        let latencies = vec!["1"; 1_000_000].join(",");
        let long = format!(r#"{{"type":"pass","scenario":"L","latencies_us":[{latencies}]}}"#);
        assert!(read_all(&[HELLO.to_string(), long]).await.is_ok());
        let endless = "x".repeat(stress_common::foreign::MAX_LINE_BYTES + 1);
        let why = read_all(&[HELLO.to_string(), endless]).await.unwrap_err();
        assert_eq!(why, "client program wrote a line longer than 8388608 bytes");
    }
}
