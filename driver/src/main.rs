use anyhow::Context;
use clap::{Parser, Subcommand};
use driver::launcher::Launcher;
use driver::launcher::kube::{self, KubeLauncher, KubeSettings};
use driver::launcher::local::LocalLauncher;
use driver::matrix::faults::FaultKind;
use driver::report::Report;
use driver::run::sweep::{LaunchFor, LaunchFuture, LauncherFor};
use driver::run::{self, RunOptions};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use stress_common::contract::RunId;
use stress_common::store::Store;
use tokio_util::sync::CancellationToken;

/// Exit codes: 0 pass, 1 stress failure, 2 bad input or configuration.
const BAD_INPUT: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "driver",
    version,
    about = "Runs a Triton stress test matrix: launches servers and workers, polls the status store, fails fast, reports."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LauncherKind {
    /// Real tritonserver and worker processes on this machine.
    Local,
    /// Triton and worker pods through the Kubernetes API (in-cluster or KUBECONFIG).
    Kube,
}

/// What `driver report` prints.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ReportFormat {
    /// report.txt
    Text,
    /// report.json
    Json,
    /// junit.xml
    Junit,
    /// report.html
    Html,
}

/// Kube launcher settings (ignored by the local launcher).
#[derive(Debug, clap::Args)]
struct KubeArgs {
    /// Namespace of the run's pods (default: the matrix's `run.namespace`, else the current
    /// kubeconfig context's, or the driver pod's own).
    #[arg(long, env = "TRITON_STRESS_NAMESPACE")]
    namespace: Option<String>,
    /// The store URL as pods reach it, when it differs from --database-url (a driver outside
    /// the cluster). It is handed to workers through a Secret.
    #[arg(long, env = "TRITON_STRESS_POD_DATABASE_URL", hide_env_values = true)]
    pod_database_url: Option<String>,
    /// imagePullPolicy of every pod: `Never` on a cluster without a registry.
    #[arg(long, default_value = "IfNotPresent", env = "TRITON_STRESS_IMAGE_PULL_POLICY",
          value_parser = ["IfNotPresent", "Always", "Never"])]
    image_pull_policy: String,
    /// A pod still Pending after this long fails the run (unschedulable, image not pullable).
    #[arg(long, default_value = "3m", env = "TRITON_STRESS_POD_PENDING_TIMEOUT",
          value_parser = wait)]
    pending_timeout: Duration,
}

/// The subcommands; `main` hands each to its function (`run_command` for `Run`, ...). A
/// subcommand's help is its variant's doc comment: the argument structs have none (`//`).
#[derive(Debug, Subcommand)]
enum Command {
    /// Run a matrix to the end or to its first failure; writes report.txt, report.json,
    /// junit.xml and report.html.
    Run(RunArgs),
    /// End the runs whose driver vanished (their lease ran out: ABANDONED), and delete what
    /// Kubernetes runs left: with --run, every object of that run (kept after a failure, or
    /// abandoned); without, those of each run found abandoned. A local run's processes die with
    /// their driver, so only its verdict is left to set.
    Cleanup(CleanupArgs),
    /// Check matrices without running anything.
    Validate(ValidateArgs),
    /// Rebuild a run's report from the store.
    Report(ReportArgs),
    /// Is B different from A? Two finished runs (or groups of repeated runs, comma-separated)
    /// compared metric by metric: the change with its 95% interval and q-value, and the call
    /// (REGRESSION, IMPROVED, provisional, or "~ no significant change").
    Compare(CompareArgs),
    /// Serve the runs in a browser and as JSON: the list (filter by matrix and verdict), each
    /// run's report rebuilt from its store, /api/runs, /metrics for alerting. From one store
    /// (--database-url) or the run directories under --runs-dir. Reads only.
    Serve(ServeArgs),
    /// List finished runs, newest first: verdict, load, failure signatures (new / recurring /
    /// known), regressions and root cause. From one store (--database-url: a cluster's
    /// Postgres holds every night) or the run directories under --runs-dir. Reads only.
    Runs(RunsArgs),
    /// One matrix's history (its newest run's fingerprint; the runs that measured their load in
    /// full, oldest first) and the change points in each metric (E-Divisive means, t-test
    /// p < 0.001, as Apache Otava finds them); `--format csv` is the series as Otava's CSV
    /// importer reads them. Reads only.
    History(HistoryArgs),
    /// Delete the runs started longer ago than --older-than, with everything recorded for them:
    /// from the store of --database-url, or the run directories under --runs-dir (a directory
    /// whose store keeps no run is removed). Runs still going and pinned baselines stay.
    Prune(PruneArgs),
    /// Baselines for regression comparisons.
    #[command(subcommand)]
    Baseline(BaselineCommand),
    /// Print the matrix's planned faults as one Chaos Mesh Workflow (YAML), for a cluster that
    /// has Chaos Mesh: planned as `driver run` plans them (same seed, same load phase), applied
    /// by nothing here. Checked against chaos-mesh's CRD schemas only, never run against a Chaos
    /// Mesh controller by this project (docs/faults.md).
    ChaosMesh(ChaosMeshArgs),
    /// Print the matrix JSON schema.
    Schema,
    /// Summarise Triton trace files (level TIMESTAMPS, triton mode) per model and protocol:
    /// receive, queue, compute input / infer / output and send time.
    TraceSummary(TraceSummaryArgs),
}

// `driver run`.
#[derive(Debug, clap::Args)]
struct RunArgs {
    matrix: PathBuf,
    #[arg(
        long,
        value_enum,
        default_value = "local",
        env = "TRITON_STRESS_LAUNCHER"
    )]
    launcher: LauncherKind,
    /// Where run directories are created.
    #[arg(long, default_value = "runs", env = "TRITON_STRESS_RUNS_DIR")]
    runs_dir: PathBuf,
    /// Reuse a run id (default: <name>-<date>-<time>-<random>).
    #[arg(long, env = "TRITON_STRESS_RUN_ID")]
    run_id: Option<String>,
    /// Status store; default: a SQLite file in the run directory.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Override the matrix's run duration (e.g. 30s).
    #[arg(long, value_parser = run_length)]
    duration: Option<Duration>,
    /// Plain log lines instead of a live progress line, even in a terminal.
    #[arg(long)]
    no_progress: bool,
    /// On failure keep the failed pods and the servers they talked to (default: the
    /// matrix's `run.keep_failed`); `--keep-failed=false` deletes everything.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", env = "TRITON_STRESS_KEEP_FAILED")]
    keep_failed: Option<bool>,
    /// Compare with this run (default: the pinned, else the last passing run of the same
    /// matrix name, in the store or under --runs-dir).
    #[arg(long, env = "TRITON_STRESS_BASELINE")]
    baseline: Option<String>,
    /// Known issues besides the matrix's `known_issues`: a YAML list of the same entries
    /// (e.g. test-matrices/known-issues.yaml). Their matches are counted, not failing the run.
    #[arg(long, env = "TRITON_STRESS_KNOWN_ISSUES")]
    known_issues: Option<PathBuf>,
    /// Run the load N times, each a run of its own with fresh servers (RUN-r1, …), and write
    /// each metric's mean and 95% interval across them (repeats.txt); overrides `run.repeat`.
    #[arg(long, value_parser = repeat_count)]
    repeat: Option<u32>,
    #[command(flatten)]
    kube: KubeArgs,
}

fn repeat_count(s: &str) -> Result<u32, String> {
    driver::matrix::flag(&driver::matrix::REPEATS, s)
}

fn run_length(s: &str) -> Result<Duration, String> {
    driver::matrix::flag(&driver::matrix::RUN_LENGTH, s)
}

fn wait(s: &str) -> Result<Duration, String> {
    driver::matrix::flag(&driver::matrix::WAIT, s)
}

// `driver cleanup`.
#[derive(Debug, clap::Args)]
struct CleanupArgs {
    /// Run id (the `triton-stress/run` label).
    #[arg(long)]
    run: Option<RunId>,
    /// Namespace (default: the current kubeconfig context's, or the pod's).
    #[arg(long, env = "TRITON_STRESS_NAMESPACE")]
    namespace: Option<String>,
    /// The store to look for abandoned runs in (default: the SQLite stores of the run
    /// directories under --runs-dir).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    #[arg(long, default_value = "runs", env = "TRITON_STRESS_RUNS_DIR")]
    runs_dir: PathBuf,
}

// `driver validate`.
#[derive(Debug, clap::Args)]
struct ValidateArgs {
    #[arg(required = true)]
    matrices: Vec<PathBuf>,
}

// `driver report`.
#[derive(Debug, clap::Args)]
struct ReportArgs {
    /// Run id (default: the newest run in the store).
    #[arg(long)]
    run: Option<RunId>,
    #[arg(long, default_value = "runs", env = "TRITON_STRESS_RUNS_DIR")]
    runs_dir: PathBuf,
    /// Status store; default: <runs-dir>/<run>/store.sqlite.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// What to print: the text report, report.json, JUnit XML (junit.xml) or the
    /// self-contained HTML page (report.html).
    #[arg(long, value_enum, default_value_t = ReportFormat::Text, conflicts_with_all = ["json", "junit"])]
    format: ReportFormat,
    /// Same as --format json.
    #[arg(long, conflicts_with = "junit")]
    json: bool,
    /// Same as --format junit.
    #[arg(long)]
    junit: bool,
}

// `driver compare`.
#[derive(Debug, clap::Args)]
struct CompareArgs {
    /// The baseline: a run id, or several separated by commas.
    a: String,
    /// The runs compared with it.
    b: String,
    #[arg(long, default_value = "runs", env = "TRITON_STRESS_RUNS_DIR")]
    runs_dir: PathBuf,
    /// Status store of every run; default: each run's <runs-dir>/<run>/store.sqlite.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// The smallest change worth a call (0.1 = 10%).
    #[arg(long, default_value_t = 0.1, value_parser = min_effect)]
    min_effect: f64,
    /// Rows with fewer requests are not compared.
    #[arg(long, default_value_t = 100)]
    min_requests: u64,
    /// Print the comparison as JSON.
    #[arg(long)]
    json: bool,
}

// `driver serve`.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    #[arg(long, default_value = "runs", env = "TRITON_STRESS_RUNS_DIR")]
    runs_dir: PathBuf,
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Address to listen on (loopback by default; in a cluster, behind its Service).
    #[arg(
        long,
        default_value = "127.0.0.1:8080",
        env = "TRITON_STRESS_SERVE_LISTEN"
    )]
    listen: std::net::SocketAddr,
    /// Every page but /healthz then wants `Authorization: Bearer TOKEN` (from the
    /// environment only: a token on the command line is visible to every process).
    #[arg(skip = std::env::var("TRITON_STRESS_SERVE_TOKEN").ok().filter(|t| !t.is_empty()))]
    token: Option<String>,
}

// `driver runs`.
#[derive(Debug, clap::Args)]
struct RunsArgs {
    #[arg(long, default_value = "runs", env = "TRITON_STRESS_RUNS_DIR")]
    runs_dir: PathBuf,
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// How many runs.
    #[arg(long, default_value_t = 20)]
    limit: u32,
    /// Print the summaries as JSON.
    #[arg(long)]
    json: bool,
}

// `driver history`.
#[derive(Debug, clap::Args)]
struct HistoryArgs {
    /// The matrix's name (its `run.name`).
    #[arg(long)]
    matrix: String,
    #[arg(long, value_enum, default_value = "text")]
    format: HistoryFormat,
    /// How many of its last runs (4 to 500).
    #[arg(long, default_value_t = 30, value_parser = change_point_window)]
    window: usize,
    /// The smallest change that is a change point (0.1 = 10%; Otava's `-M`).
    #[arg(long, default_value_t = 0.1, value_parser = min_effect)]
    min_effect: f64,
    #[arg(long, default_value = "runs", env = "TRITON_STRESS_RUNS_DIR")]
    runs_dir: PathBuf,
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
}

/// What `driver history` prints.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum HistoryFormat {
    /// The runs and the change points in words.
    Text,
    /// The runs' summaries and the change points.
    Json,
    /// A row per run, a column per metric: Apache Otava's CSV.
    Csv,
}

fn change_point_window(s: &str) -> Result<usize, String> {
    driver::matrix::flag(&driver::matrix::CHANGE_POINT_WINDOW, s)
}

fn min_effect(s: &str) -> Result<f64, String> {
    driver::matrix::flag(&driver::matrix::MIN_EFFECT, s)
}

// `driver prune`.
#[derive(Debug, clap::Args)]
struct PruneArgs {
    /// e.g. `30d`, `12h`.
    #[arg(long, value_parser = humantime::parse_duration)]
    older_than: std::time::Duration,
    #[arg(long, default_value = "runs", env = "TRITON_STRESS_RUNS_DIR")]
    runs_dir: PathBuf,
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// List what would go, delete nothing.
    #[arg(long)]
    dry_run: bool,
}

// `driver chaos-mesh`.
#[derive(Debug, clap::Args)]
struct ChaosMeshArgs {
    matrix: PathBuf,
    /// The run id the objects select pods by (the `triton-stress/run` label); at most 42
    /// characters, so the Workflow's name is a label value.
    #[arg(long, env = "TRITON_STRESS_RUN_ID")]
    run_id: String,
    /// The namespace of the run's pods, and of the Workflow.
    #[arg(long, env = "TRITON_STRESS_NAMESPACE")]
    namespace: String,
    /// Override the matrix's run duration, as `driver run --duration` does.
    #[arg(long, value_parser = run_length)]
    duration: Option<Duration>,
}

// `driver trace-summary`.
#[derive(Debug, clap::Args)]
struct TraceSummaryArgs {
    /// Trace files of one server; a FILE written per log-frequency as FILE.0, FILE.1, ...
    /// may be given as FILE.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum BaselineCommand {
    /// Pin RUN as the baseline of later runs of its matrix name (in the store that holds it).
    Set {
        run: RunId,
        #[arg(long, default_value = "runs", env = "TRITON_STRESS_RUNS_DIR")]
        runs_dir: PathBuf,
        /// Status store; default: <runs-dir>/<run>/store.sqlite.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: Option<String>,
    },
}

/// Parses the command line and hands the subcommand to its function, whose exit code it is.
#[tokio::main]
async fn main() -> ExitCode {
    stress_common::telemetry::init("info");
    match Cli::parse().command {
        Command::Run(args) => run_command(args).await,
        Command::Cleanup(args) => cleanup_command(args).await,
        Command::Validate(args) => validate_command(args),
        Command::Report(args) => report_command(args).await,
        Command::Compare(args) => compare_command(args).await,
        Command::Serve(args) => serve_command(args).await,
        Command::Runs(args) => runs_command(args).await,
        Command::History(args) => history_command(args).await,
        Command::Prune(args) => prune_command(args).await,
        Command::Baseline(command) => baseline_command(command).await,
        Command::ChaosMesh(args) => chaos_mesh_command(args),
        Command::Schema => schema_command(),
        Command::TraceSummary(args) => trace_summary_command(args),
    }
}

/// An error on stderr (`error: ` and its chain of causes) and the bad-input exit code.
fn bad_input(e: &anyhow::Error) -> ExitCode {
    eprintln!("error: {e:#}");
    ExitCode::from(BAD_INPUT)
}

/// `driver validate`: each matrix `ok` with its size, or its errors (exit 2).
fn validate_command(args: ValidateArgs) -> ExitCode {
    let mut bad = false;
    for m in &args.matrices {
        match driver::matrix::load(m) {
            Ok(matrix) => println!(
                "{}: ok ({} servers, {} clients)",
                m.display(),
                matrix.servers().len() + matrix.external_servers().len(),
                matrix.clients().len()
            ),
            Err(e) => {
                eprintln!("{e}");
                bad = true;
            }
        }
    }
    ExitCode::from(if bad { BAD_INPUT } else { 0 })
}

/// `driver schema`.
fn schema_command() -> ExitCode {
    print!("{}", driver::matrix::json_schema_text());
    ExitCode::SUCCESS
}

/// `driver trace-summary`: the summary as text or JSON; an unreadable or malformed file is bad
/// input.
fn trace_summary_command(args: TraceSummaryArgs) -> ExitCode {
    let mut texts = Vec::new();
    for f in args
        .files
        .iter()
        .flat_map(|f| driver::report::trace::files_of(f))
    {
        match std::fs::read_to_string(&f) {
            Ok(t) => texts.push((f.display().to_string(), t)),
            Err(e) => {
                eprintln!("{}: {e}", f.display());
                return ExitCode::from(BAD_INPUT);
            }
        }
    }
    match driver::report::trace::parse(&texts) {
        Ok(traces) => {
            let summary = driver::report::trace::summarize(&traces);
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&summary).expect("plain data serialises")
                );
            } else {
                print!("{}", summary.render());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(BAD_INPUT)
        }
    }
}

/// `driver report`: the report in the format asked for.
async fn report_command(args: ReportArgs) -> ExitCode {
    // --json and --junit: the older spellings of --format.
    let format = match (args.json, args.junit) {
        (true, _) => ReportFormat::Json,
        (_, true) => ReportFormat::Junit,
        _ => args.format,
    };
    match report(args.run, &args.runs_dir, args.database_url, format).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => bad_input(&e),
    }
}

/// `driver compare`: the judged changes of B against A, as text or JSON.
async fn compare_command(args: CompareArgs) -> ExitCode {
    let side = |s: &str| {
        s.split(',')
            .map(|id| RunId::new(id.trim()))
            .collect::<Vec<_>>()
    };
    let (a, b) = (side(&args.a), side(&args.b));
    let compared = compare(
        &a,
        &b,
        &args.runs_dir,
        args.database_url,
        args.min_effect,
        args.min_requests,
    )
    .await;
    match compared {
        Ok(judged) => print_json_or_text(&judged, args.json, driver::render::text::judged),
        Err(e) => bad_input(&e),
    }
}

/// `value` on stdout, as pretty JSON when `json`, else as `text` writes it; exits 0.
fn print_json_or_text<T: serde::Serialize>(
    value: &T,
    json: bool,
    text: impl FnOnce(&T) -> String,
) -> ExitCode {
    if json {
        let json = serde_json::to_string_pretty(value).expect("plain data serialises");
        println!("{json}");
    } else {
        print!("{}", text(value));
    }
    ExitCode::SUCCESS
}

/// `driver serve`: until a signal; an address it cannot listen on is bad input.
async fn serve_command(args: ServeArgs) -> ExitCode {
    let source = match args.database_url {
        Some(url) => driver::serve::Source::Store(url),
        None => driver::serve::Source::RunsDir(args.runs_dir),
    };
    let cancel = stress_common::shutdown::token_on_signals();
    let listen = args.listen;
    let served = driver::serve::serve(source, args.token, listen, cancel, |at| {
        // On stdout, so scripts and tests find the port when 0 was asked for.
        println!("serving on http://{at}/");
    })
    .await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot serve on {listen}: {e}");
            ExitCode::from(BAD_INPUT)
        }
    }
}

/// `driver prune`: each run pruned (or that would be), and how many; a failure exits 1.
async fn prune_command(args: PruneArgs) -> ExitCode {
    let PruneArgs {
        older_than,
        runs_dir,
        database_url,
        dry_run,
    } = args;
    match run::prune::prune(database_url.as_deref(), &runs_dir, older_than, dry_run).await {
        Ok(pruned) => {
            let verb = if dry_run { "would prune" } else { "pruned" };
            for p in &pruned {
                println!(
                    "{verb} {} ({}, started {}, {}){}",
                    p.run_id,
                    p.name,
                    driver::report::format_time(p.started_at_ms),
                    p.verdict.as_deref().unwrap_or("ABANDONED"),
                    p.removed_dir
                        .as_ref()
                        .map(|d| format!(", directory {}", d.display()))
                        .unwrap_or_default()
                );
            }
            println!("{} run(s) {verb}", pruned.len());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `driver runs`: the finished runs' summaries, as text or JSON.
async fn runs_command(args: RunsArgs) -> ExitCode {
    use driver::report::summary::{self, RunSource};
    let source = match &args.database_url {
        Some(url) => RunSource::Store(url),
        None => RunSource::RunsDir(&args.runs_dir),
    };
    match summary::list(source, args.limit).await {
        Ok(runs) => print_json_or_text(&runs, args.json, |r| driver::render::text::run_list(r)),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(BAD_INPUT)
        }
    }
}

/// `driver history`: every finished run the source lists, narrowed to the matrix's history.
async fn history_command(args: HistoryArgs) -> ExitCode {
    use driver::report::history;
    use driver::report::summary::{self, RunSource};
    let source = match &args.database_url {
        Some(url) => RunSource::Store(url),
        None => RunSource::RunsDir(&args.runs_dir),
    };
    let runs = match summary::list(source, 10_000).await {
        Ok(runs) => runs,
        Err(e) => return bad_input(&e.into()),
    };
    let of = match history::of_matrix(&runs, &args.matrix, args.window) {
        Ok(of) => of,
        Err(why) => return bad_input(&anyhow::anyhow!(why)),
    };
    let found = history::change_points(&of, args.min_effect);
    match args.format {
        HistoryFormat::Text => print!("{}", history::text(&args.matrix, &of, &found)),
        HistoryFormat::Csv => print!("{}", history::otava_csv(&of)),
        HistoryFormat::Json => println!(
            "{}",
            serde_json::json!({"matrix": args.matrix, "runs": of, "change_points": found})
        ),
    }
    ExitCode::SUCCESS
}

/// `driver baseline set`.
async fn baseline_command(command: BaselineCommand) -> ExitCode {
    let BaselineCommand::Set {
        run,
        runs_dir,
        database_url,
    } = command;
    match pin_baseline(&run, &runs_dir, database_url).await {
        Ok(name) => {
            println!("run {run} is the baseline of runs named {name}");
            ExitCode::SUCCESS
        }
        Err(e) => bad_input(&e),
    }
}

/// `driver cleanup`.
async fn cleanup_command(args: CleanupArgs) -> ExitCode {
    match cleanup(args.run, args.namespace, args.database_url, &args.runs_dir).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => bad_input(&e),
    }
}

/// `driver run`: a run, or a sweep's runs, to the end or the first failure; prints the report
/// and exits with the verdict's code.
async fn run_command(args: RunArgs) -> ExitCode {
    let RunArgs {
        matrix,
        launcher: kind,
        runs_dir,
        run_id,
        database_url,
        duration,
        no_progress,
        keep_failed,
        baseline,
        known_issues,
        repeat,
        kube,
    } = args;
    let options = RunOptions {
        matrix,
        runs_dir,
        run_id,
        database_url,
        duration,
        progress: no_progress.then_some(false),
        keep_failed,
        baseline,
        known_issues,
    };
    let (mut matrix, run_id, run_dir) = match run::prepare(&options) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(e.exit_code());
        }
    };
    if let Some(n) = repeat {
        if n > 1 && matrix.sweep.is_some() {
            eprintln!("error: --repeat: a sweep measures each variant and confirms the best");
            return ExitCode::from(BAD_INPUT);
        }
        if n > 1 && !matrix.run.cells.is_together() {
            eprintln!("error: --repeat: cells in turn (run.cells) are runs of their own");
            return ExitCode::from(BAD_INPUT);
        }
        matrix.run.repeat = n;
    }
    let cancel = stress_common::shutdown::token_on_signals();
    if matrix.sweep.is_some()
        || matrix.run.repeat > 1
        || matrix.compare.is_some()
        || matrix.runs_cells_in_turn()
    {
        let runs = Runs {
            options: &options,
            matrix: &matrix,
            run_id: &run_id,
            run_dir: &run_dir,
        };
        return runs_of_one_command(runs, kind, kube, cancel).await;
    }
    let mut launcher: Box<dyn Launcher> = match kind {
        LauncherKind::Local => Box::new(LocalLauncher::new(&run_dir, &matrix_dir(&matrix))),
        LauncherKind::Kube => match kube_launcher(&options, &matrix, &run_id, kube).await {
            Ok(l) => Box::new(l),
            Err(e) => return bad_input(&e),
        },
    };
    tracing::info!(run_id, run_dir = %run_dir.display(), launcher = launcher.name(), "starting run");
    let outcome = run::run(
        &options,
        launcher.as_mut(),
        &matrix,
        &run_dir,
        &run_id,
        cancel,
    )
    .await;
    finish_run_command(outcome, &options)
}

/// The folder of the matrix file, which its relative paths start from.
fn matrix_dir(matrix: &driver::matrix::Matrix) -> PathBuf {
    matrix
        .source_path
        .as_deref()
        .and_then(|p| p.parent())
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// A `driver run` made of runs: a sweep's or a repeat's.
struct Runs<'a> {
    options: &'a RunOptions,
    matrix: &'a driver::matrix::Matrix,
    run_id: &'a str,
    run_dir: &'a std::path::Path,
}

/// `driver run` of a sweep matrix or of repeats: each of its runs (a sweep's own, then each
/// variant's; each repeat) gets a launcher of its own run id; on Kubernetes they share one
/// cluster connection.
async fn runs_of_one_command(
    runs: Runs<'_>,
    kind: LauncherKind,
    kube: KubeArgs,
    cancel: CancellationToken,
) -> ExitCode {
    let Runs {
        options,
        matrix,
        run_id,
        run_dir,
    } = runs;
    tracing::info!(run_id, run_dir = %run_dir.display(), "starting a run of runs");
    let cluster = match kind {
        LauncherKind::Local => None,
        LauncherKind::Kube => {
            if let Some(refused) = binary_sweep_on_pods(matrix) {
                eprintln!("{refused}");
                return ExitCode::from(BAD_INPUT);
            }
            match KubeCluster::connect(options, matrix, kube).await {
                Ok(c) => Some(c),
                Err(e) => return bad_input(&e),
            }
        }
    };
    let matrix_dir = matrix_dir(matrix);
    let duration = options.duration;
    let launcher_for: Box<LauncherFor<'_>> = match &cluster {
        None => Box::new(|l: LaunchFor<'_>| -> LaunchFuture {
            let launcher: Box<dyn Launcher> = Box::new(LocalLauncher::new(l.dir, &matrix_dir));
            Box::pin(std::future::ready(Ok(launcher)))
        }),
        Some(cluster) => Box::new(move |l: LaunchFor<'_>| -> LaunchFuture {
            let client = cluster.client.clone();
            let settings = cluster.settings(
                l.run_id,
                std::fs::read_to_string(l.matrix_file).unwrap_or_default(),
                l.matrix,
                duration,
            );
            Box::pin(async move {
                let launcher: Box<dyn Launcher> =
                    Box::new(KubeLauncher::start(client, settings).await?);
                Ok(launcher)
            })
        }),
    };
    let runs = run::RunsOf {
        options,
        matrix,
        run_dir,
        run_id,
        cancel,
        launcher_for: launcher_for.as_ref(),
    };
    if matrix.compare.is_some() {
        let outcome = run::repeat::compare(runs).await;
        return finish_repeat_command(outcome, &run_dir.join("compare.txt"));
    }
    if matrix.runs_cells_in_turn() {
        let outcome = run::repeat::cells_in_turn(runs).await;
        return finish_repeat_command(outcome, &run_dir.join("grid.txt"));
    }
    if matrix.sweep.is_none() {
        let outcome = run::repeat::repeat(runs).await;
        return finish_repeat_command(outcome, &run_dir.join("repeats.txt"));
    }
    finish_run_command(run::sweep::sweep(runs).await, options)
}

/// Prints what was found across the runs and where it is; exits as the worst run.
fn finish_repeat_command(
    outcome: Result<run::repeat::RepeatOutcome, run::DriverError>,
    written: &std::path::Path,
) -> ExitCode {
    match outcome {
        Ok(outcome) => {
            print!("{}", outcome.text);
            println!(
                "\n{} (each run's report in its own run directory)",
                written.display()
            );
            let verdict = outcome.verdict();
            if let run::Verdict::Fail { member, reason } = &verdict {
                println!("FAILED: {member}: {reason}");
            }
            ExitCode::from(verdict.exit_code())
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `driver chaos-mesh`: the Workflow on stdout, or bad input (exit 2) on stderr.
fn chaos_mesh_command(args: ChaosMeshArgs) -> ExitCode {
    use driver::launcher::kube::chaos_mesh;
    let ChaosMeshArgs {
        matrix,
        run_id,
        namespace,
        duration,
    } = args;
    let (matrix, run_id, namespace) = (matrix.as_path(), run_id.as_str(), namespace.as_str());
    let injections = match run::planned_faults(matrix, run_id, duration) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(e.exit_code());
        }
    };
    if let Err(e) = chaos_mesh::check_names(run_id, namespace) {
        eprintln!("error: {e}");
        return ExitCode::from(BAD_INPUT);
    }
    let unrenderable = chaos_mesh::unrenderable(&injections);
    if !unrenderable.is_empty() {
        for line in unrenderable {
            eprintln!("{}: {line}", matrix.display());
        }
        return ExitCode::from(BAD_INPUT);
    }
    if injections.is_empty() {
        eprintln!(
            "{}: no fault to render (no `faults:`, or none fits the load phase)",
            matrix.display()
        );
        return ExitCode::from(BAD_INPUT);
    }
    println!(
        "# Chaos Mesh Workflow: the faults of {} for run {run_id},\n\
         # planned as `driver run` plans them (same seed, same load phase).\n\
         # Rendered only: checked against the CRD schemas of {}, never run against a\n\
         # Chaos Mesh controller by this project (docs/faults.md). Each fault comes at its time\n\
         # from the Workflow's creation: create it when the load phase starts.",
        matrix.display(),
        chaos_mesh::CHECKED_AGAINST
    );
    for line in chaos_mesh::describe(&injections) {
        println!("#   {line}");
    }
    for object in chaos_mesh::render(&injections, run_id, namespace) {
        println!("---");
        print!(
            "{}",
            serde_saphyr::to_string(&object).expect("a JSON value serialises to YAML")
        );
    }
    ExitCode::SUCCESS
}

/// Prints a run's report and where it is, and says how the command exits.
fn finish_run_command(
    outcome: Result<run::RunOutcome, run::DriverError>,
    options: &RunOptions,
) -> ExitCode {
    match outcome {
        Ok(outcome) => {
            print!("{}", outcome.report.render());
            println!(
                "\nreport: {} (in a browser: {})\nrebuild it: driver report --run {} --runs-dir {}",
                outcome.run_dir.join("report.txt").display(),
                outcome.run_dir.join("report.html").display(),
                outcome.run_id,
                options.runs_dir.display()
            );
            match &outcome.verdict {
                run::Verdict::Fail { member, reason } => {
                    println!("FAILED: {member}: {reason}")
                }
                run::Verdict::BadInput(reason) => println!("BAD INPUT: {reason}"),
                _ => {}
            }
            ExitCode::from(outcome.verdict.exit_code())
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// A sweep of `server.tritonserver.binary` where servers are pods (images): bad input naming
/// the parameter, said before anything starts.
fn binary_sweep_on_pods(matrix: &driver::matrix::Matrix) -> Option<String> {
    const BINARY: &str = "server.tritonserver.binary";
    let param = matrix
        .sweep
        .as_ref()?
        .parameters
        .keys()
        .find(|p| *p == BINARY)?;
    Some(format!(
        "{}: {BINARY}: the kube launcher runs images (sweep server.tritonserver.image instead)",
        matrix.locate_sweep_parameter(param)
    ))
}

/// The cluster a kube run uses and what every run there shares: the cluster from KUBECONFIG
/// or in-cluster, the store as pods see it (a Postgres URL: pods cannot reach the embedded
/// SQLite file).
struct KubeCluster {
    client: ::kube::Client,
    /// Its API calls' proxy, when the matrix plans an `api-outage`.
    api_proxy: Option<kube::ApiProxy>,
    namespace: String,
    pod_store_url: String,
    image_pull_policy: String,
    pending_timeout: Duration,
    /// The node of the driver's own pod, when the matrix plans a `drain`.
    driver_node: Option<String>,
}

impl KubeCluster {
    async fn connect(
        options: &RunOptions,
        matrix: &driver::matrix::Matrix,
        args: KubeArgs,
    ) -> anyhow::Result<Self> {
        let pod_store_url = args
            .pod_database_url
            .or_else(|| options.database_url.clone())
            .filter(|u| u.starts_with("postgres"))
            .context(
                "--launcher kube needs a Postgres store that pods can reach: --database-url \
                 postgres://... (and --pod-database-url when pods reach it at another address)",
            )?;
        let refused = run::uninjectable(matrix, kube::can_inject);
        if !refused.is_empty() {
            anyhow::bail!("{}", refused.join("\n"));
        }
        let cuttable = matrix.faults.iter().any(|f| f.kind == FaultKind::ApiOutage);
        let (client, api_proxy) = kube::connect(cuttable).await?;
        let namespace = args
            .namespace
            .or_else(|| matrix.run.namespace.clone())
            .unwrap_or_else(|| client.default_namespace().to_string());
        let refused = kube::store_restart_refusals(&client, &namespace, matrix).await;
        if !refused.is_empty() {
            anyhow::bail!("{}", refused.join("\n"));
        }
        let drains = matrix.faults.iter().any(|f| f.kind == FaultKind::Drain);
        let driver_node = match drains {
            false => None,
            true => kube::drain::preflight(&client).await.map_err(|why| {
                anyhow::anyhow!("{}", kube::drain::refusals(matrix, &why).join("\n"))
            })?,
        };
        Ok(Self {
            client,
            api_proxy,
            namespace,
            pod_store_url,
            image_pull_policy: args.image_pull_policy,
            pending_timeout: args.pending_timeout,
            driver_node,
        })
    }

    /// The settings of one run of `matrix` (a sweep variant's carries its model configs).
    fn settings(
        &self,
        run_id: &str,
        matrix_yaml: String,
        matrix: &driver::matrix::Matrix,
        duration: Option<Duration>,
    ) -> KubeSettings {
        KubeSettings {
            namespace: self.namespace.clone(),
            run_id: run_id.into(),
            matrix_yaml,
            pod_store_url: self.pod_store_url.clone(),
            image_pull_policy: self.image_pull_policy.clone(),
            pending_timeout: self.pending_timeout,
            pod_deadline_seconds: kube::pod_deadline(
                duration.unwrap_or(matrix.run.duration),
                matrix.run.warmup,
                matrix.run.server_ready_timeout,
            ),
            model_configs: kube::model_config_data(matrix),
            api_proxy: self.api_proxy.clone(),
            driver_node: self.driver_node.clone(),
        }
    }
}

/// The kube launcher for a run.
async fn kube_launcher(
    options: &RunOptions,
    matrix: &driver::matrix::Matrix,
    run_id: &str,
    args: KubeArgs,
) -> anyhow::Result<KubeLauncher> {
    let cluster = KubeCluster::connect(options, matrix, args).await?;
    let settings = cluster.settings(
        run_id,
        std::fs::read_to_string(&options.matrix).unwrap_or_default(),
        matrix,
        options.duration,
    );
    Ok(KubeLauncher::start(cluster.client, settings).await?)
}

/// Run directories `driver cleanup` looks into for abandoned runs.
const CLEANUP_SCANNED_RUN_DIRS: usize = 1000;

async fn cleanup(
    run: Option<RunId>,
    namespace: Option<String>,
    database_url: Option<String>,
    runs_dir: &std::path::Path,
) -> anyhow::Result<()> {
    const STORE_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);
    let urls = match database_url {
        Some(url) => vec![url],
        None => driver::report::baseline::run_dir_stores(runs_dir, CLEANUP_SCANNED_RUN_DIRS),
    };
    let mut kube_runs = std::collections::BTreeSet::new();
    // The launcher of the run given by --run, once a store here knows it.
    let mut launcher_of_run = None;
    for url in urls {
        let store = stress_common::store::within(STORE_LIMIT, Store::connect(&url))
            .await
            .map_err(anyhow::Error::msg)?;
        let now = stress_common::now_ms();
        for r in stress_common::store::within(STORE_LIMIT, store.abandon_expired(now))
            .await
            .map_err(anyhow::Error::msg)?
        {
            println!(
                "run {}: ABANDONED (its driver's lease ran out; {} launcher)",
                r.run_id, r.launcher
            );
            if r.launcher == "kube" {
                kube_runs.insert(r.run_id);
            }
        }
        if let Some(id) = &run
            && launcher_of_run.is_none()
            && let Some(row) = stress_common::store::within(STORE_LIMIT, store.run(id))
                .await
                .map_err(anyhow::Error::msg)?
        {
            launcher_of_run = Some(row.launcher);
        }
    }
    if let Some(id) = run {
        match launcher_of_run.as_deref() {
            // A run no store here knows is a cluster's (its store is the cluster's Postgres).
            Some("kube") | None => {
                kube_runs.insert(id.to_string());
            }
            Some(launcher) => println!(
                "run {id}: {launcher} launcher: its processes ended with their driver, nothing to delete"
            ),
        }
    }
    if kube_runs.is_empty() {
        println!("no Kubernetes objects to delete");
        return Ok(());
    }
    let (client, _) = kube::connect(false).await?;
    let ns = namespace.unwrap_or_else(|| client.default_namespace().to_string());
    for run in kube_runs {
        let n = kube::delete_run(&client, &ns, &run).await?;
        println!("run {run}: {n} object(s) deleted");
    }
    Ok(())
}

/// The store that holds `run`: --database-url, else the run's own SQLite file.
fn store_url_of(
    run: Option<&str>,
    runs_dir: &std::path::Path,
    database_url: Option<String>,
) -> anyhow::Result<String> {
    match (database_url, run) {
        (Some(url), _) => Ok(url),
        (None, Some(run)) => {
            let file = runs_dir.join(run).join("store.sqlite");
            anyhow::ensure!(
                file.is_file(),
                "no store at {} (give --database-url for Postgres)",
                file.display()
            );
            Ok(Store::sqlite_url(&file))
        }
        (None, None) => anyhow::bail!("give --run ID (and --database-url for a Postgres store)"),
    }
}

/// Pins `run` as its name's baseline; returns the name.
async fn pin_baseline(
    run: &RunId,
    runs_dir: &std::path::Path,
    database_url: Option<String>,
) -> anyhow::Result<String> {
    let store = Store::connect(&store_url_of(Some(run), runs_dir, database_url)?).await?;
    let found = store
        .run(run)
        .await?
        .with_context(|| format!("no run {run} in the store"))?;
    store.pin_baseline(&found.name, run).await?;
    Ok(found.name)
}

/// `driver compare`: the measures of each run of `a` and `b`, judged.
async fn compare(
    a: &[RunId],
    b: &[RunId],
    runs_dir: &std::path::Path,
    database_url: Option<String>,
    min_effect: f64,
    min_requests: u64,
) -> anyhow::Result<driver::judge::change::Judged> {
    let mut sides = Vec::new();
    for runs in [a, b] {
        let mut measures = Vec::new();
        for run in runs {
            let url = store_url_of(Some(run), runs_dir, database_url.clone())?;
            let store =
                Store::open_read_only(&url, &stress_common::store::StoreOptions::reading()).await?;
            let report = Report::from_store(&store, run).await?;
            measures.push(report.measures(min_requests));
        }
        sides.push(measures);
    }
    Ok(driver::judge::change::compare_groups(
        &sides[0], &sides[1], min_effect,
    ))
}

/// `driver report` warns of a store statement only beyond this (its target is 5 s in all).
const REPORT_SLOW_STATEMENT: std::time::Duration = std::time::Duration::from_secs(10);

async fn report(
    run: Option<RunId>,
    runs_dir: &std::path::Path,
    database_url: Option<String>,
    format: ReportFormat,
) -> anyhow::Result<()> {
    let url = store_url_of(run.as_deref(), runs_dir, database_url)?;
    // A long run's report reads its whole history: statements of seconds are expected there
    // (until Postgres has analysed a freshly loaded table), not worth a warning per statement.
    let options = stress_common::store::StoreOptions {
        slow_statement: REPORT_SLOW_STATEMENT,
        ..Default::default()
    };
    let store = Store::connect_with(&url, &options).await?;
    let run_id = match run {
        Some(r) => r,
        None => store
            .latest_run_id()
            .await?
            .map(RunId::new)
            .context("the store has no run")?,
    };
    let report = Report::from_store(&store, &run_id).await?;
    match format {
        ReportFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        ReportFormat::Junit => print!("{}", driver::render::junit::render(&report)),
        ReportFormat::Html => print!("{}", driver::render::html::render(&report)),
        ReportFormat::Text => print!("{}", report.render()),
    }
    Ok(())
}
