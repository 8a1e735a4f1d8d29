use clap::Parser;
use std::process::ExitCode;
use std::sync::Arc;
use stress_common::status::{EventKind, JsonLinesSink, NoopSink, StatusSink, final_event_details};
use stress_common::store::{Store, StoreOptions};
use worker::config::{Cli, Hidden};

/// Exit codes: 0 no failure, 1 a scenario failed, 2 bad input or unusable server.
const BAD_INPUT: u8 = 2;

fn main() -> ExitCode {
    stress_common::telemetry::init("info");
    let cli = Cli::parse();
    let threads = match cli.command {
        Some(_) => 1,
        None => cli.run.runtime_threads(),
    };
    // One thread: the current-thread scheduler (no work-stealing, no cross-thread wake-ups).
    let runtime = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    };
    match runtime {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> ExitCode {
    if let Some(Hidden::CrashingChild {
        server,
        protocol,
        model,
        delay_ms,
    }) = cli.command
    {
        return match worker::scenarios::crashing::child_main(&server, protocol, &model, delay_ms)
            .await
        {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("crashing child: {e:#}");
                ExitCode::from(BAD_INPUT)
            }
        };
    }
    let report_json = cli.run.report_json.clone();
    let metrics_addr = cli.run.metrics_addr;
    let sink = match make_sink(&cli.run).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(BAD_INPUT);
        }
    };
    let config = match cli.run.into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            // As a pre-flight error is: the driver's root cause then says why.
            let details = final_event_details(&format!("bad input: {e}"));
            worker::run::record_final_event(&*sink, EventKind::Failure, &details).await;
            return ExitCode::from(BAD_INPUT);
        }
    };
    let cancel = stress_common::shutdown::token_on_signals();
    let metrics = match metrics_addr {
        None => None,
        Some(addr) => {
            let m = Arc::new(worker::metrics::Metrics::default());
            match worker::metrics::serve(m.clone(), addr, cancel.clone()).await {
                Ok(bound) => tracing::info!("metrics on http://{bound}/metrics"),
                Err(e) => {
                    eprintln!("error: metrics address {addr}: {e}");
                    return ExitCode::from(BAD_INPUT);
                }
            }
            Some(m)
        }
    };
    match worker::run::run(config, sink, metrics, cancel).await {
        Ok(report) => {
            print!("{}", report.render());
            if let Some(path) = report_json {
                let json = serde_json::to_string_pretty(&report).expect("report serialises");
                if let Err(e) = std::fs::write(&path, json) {
                    eprintln!("error: writing {}: {e}", path.display());
                }
            }
            ExitCode::from(report.exit_code())
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(BAD_INPUT)
        }
    }
}

async fn make_sink(args: &worker::config::RunArgs) -> anyhow::Result<Arc<dyn StatusSink>> {
    if let Some(url) = &args.store_url {
        let (Some(run_id), Some(member_id)) = (&args.contract.run_id, &args.contract.member_id)
        else {
            anyhow::bail!("--store-url needs --run-id and --member-id");
        };
        // The outbox gives up on a write after its attempt timeout and tries again; the
        // server ends what it gave up on soon after, so the pool's two connections never stay
        // with writes nobody waits for (a lock that is not released, a stuck statement).
        let options = StoreOptions {
            server_wait_limit: Some(2 * stress_common::outbox::Limits::default().attempt_timeout),
            ..StoreOptions::default()
        };
        let store = Store::connect_with(url, &options).await?;
        return Ok(Arc::new(store.sink(run_id.clone(), member_id.clone())));
    }
    Ok(match &args.status_file {
        Some(path) => Arc::new(JsonLinesSink::create(path).await?),
        None => Arc::new(NoopSink),
    })
}
