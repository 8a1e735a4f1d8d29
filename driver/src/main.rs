use anyhow::Context;
use clap::{Parser, Subcommand};
use driver::launcher::local::LocalLauncher;
use driver::report::Report;
use driver::run::{self, RunOptions};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use stress_common::store::Store;

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
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a matrix to the end or to its first failure; writes report.txt and report.json.
    Run {
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
        #[arg(long, value_parser = humantime::parse_duration)]
        duration: Option<Duration>,
        /// Plain log lines instead of a live progress line, even in a terminal.
        #[arg(long)]
        no_progress: bool,
    },
    /// Check matrices without running anything.
    Validate {
        #[arg(required = true)]
        matrices: Vec<PathBuf>,
    },
    /// Rebuild a run's report from the store.
    Report {
        /// Run id (default: the newest run in the store).
        #[arg(long)]
        run: Option<String>,
        #[arg(long, default_value = "runs", env = "TRITON_STRESS_RUNS_DIR")]
        runs_dir: PathBuf,
        /// Status store; default: <runs-dir>/<run>/store.sqlite.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: Option<String>,
        /// Print report.json instead of the text report.
        #[arg(long)]
        json: bool,
    },
    /// Print the matrix JSON schema.
    Schema,
}

#[tokio::main]
async fn main() -> ExitCode {
    stress_common::telemetry::init("info");
    let cli = Cli::parse();
    match cli.command {
        Command::Validate { matrices } => {
            let mut bad = false;
            for m in &matrices {
                match driver::matrix::load(m) {
                    Ok(matrix) => println!(
                        "{}: ok ({} servers, {} clients)",
                        m.display(),
                        matrix.servers().len(),
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
        Command::Schema => {
            print!("{}", driver::matrix::json_schema_text());
            ExitCode::SUCCESS
        }
        Command::Report {
            run,
            runs_dir,
            database_url,
            json,
        } => match report(run, &runs_dir, database_url, json).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(BAD_INPUT)
            }
        },
        Command::Run {
            matrix,
            launcher: LauncherKind::Local,
            runs_dir,
            run_id,
            database_url,
            duration,
            no_progress,
        } => {
            let options = RunOptions {
                matrix,
                runs_dir,
                run_id,
                database_url,
                duration,
                progress: no_progress.then_some(false),
            };
            let (matrix, run_id, run_dir) = match run::prepare(&options) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(e.exit_code());
                }
            };
            let matrix_dir = matrix
                .source_path
                .as_deref()
                .and_then(|p| p.parent())
                .map(PathBuf::from)
                .unwrap_or_default();
            let mut launcher = LocalLauncher::new(&run_dir, &matrix_dir);
            let cancel = stress_common::shutdown::token_on_signals();
            tracing::info!(run_id, run_dir = %run_dir.display(), "starting run");
            match run::run(&options, &mut launcher, &matrix, &run_dir, &run_id, cancel).await {
                Ok(outcome) => {
                    print!("{}", outcome.report.render());
                    println!(
                        "\nreport: {}\nrebuild it: driver report --run {} --runs-dir {}",
                        outcome.run_dir.join("report.txt").display(),
                        outcome.run_id,
                        options.runs_dir.display()
                    );
                    if let run::Verdict::Fail { member, reason } = &outcome.verdict {
                        println!("FAILED: {member}: {reason}");
                    }
                    ExitCode::from(outcome.verdict.exit_code())
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(e.exit_code())
                }
            }
        }
    }
}

async fn report(
    run: Option<String>,
    runs_dir: &std::path::Path,
    database_url: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let url = match (&database_url, &run) {
        (Some(url), _) => url.clone(),
        (None, Some(run)) => {
            let file = runs_dir.join(run).join("store.sqlite");
            anyhow::ensure!(
                file.is_file(),
                "no store at {} (give --database-url for Postgres)",
                file.display()
            );
            Store::sqlite_url(&file)
        }
        (None, None) => anyhow::bail!("give --run ID (and --database-url for a Postgres store)"),
    };
    let store = Store::connect(&url).await?;
    let run_id = match run {
        Some(r) => r,
        None => store
            .latest_run_id()
            .await?
            .context("the store has no run")?,
    };
    let report = Report::from_store(&store, &run_id).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
    }
    Ok(())
}
