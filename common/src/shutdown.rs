//! How a process ends: the one cancellation token fired by the first SIGTERM or SIGINT (a
//! second one ends the process at once), and children that die with their parent.

use tokio_util::sync::CancellationToken;

/// The exit status after a second SIGTERM or SIGINT: the run did not end cleanly.
pub const SECOND_SIGNAL_EXIT: i32 = 1;

/// Fires the token at the first SIGTERM or SIGINT, so the process stops cleanly (a driver
/// stops its members and writes its report). A second one exits at once: whoever sends it
/// wants the process gone, and its children (see [`dies_with_parent`]) go with it.
pub fn token_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let fired = token.clone();
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("installing a SIGTERM handler");
            let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .expect("installing a SIGINT handler");
            tokio::select! {
                _ = int.recv() => tracing::info!("SIGINT received, stopping (a second one ends at once)"),
                _ = term.recv() => tracing::info!("SIGTERM received, stopping (a second one ends at once)"),
            }
            fired.cancel();
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            tracing::warn!("a second signal: exiting now");
            std::process::exit(SECOND_SIGNAL_EXIT);
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            fired.cancel();
        }
    });
    token
}

/// A command for `program` whose process gets SIGTERM when this process dies, however it dies
/// (SIGKILL, a crash, a node drain): no tritonserver or worker outlives its driver. Started
/// through util-linux's `setpriv --pdeathsig TERM` (Linux's parent-death signal; it survives the
/// exec, so the pid is the program's), without it (not Linux, no setpriv) a plain command.
/// The signal follows the thread that spawns: spawn from an async fn (a runtime worker thread),
/// not from a short-lived blocking thread.
pub fn command_dying_with_parent(program: impl AsRef<std::ffi::OsStr>) -> tokio::process::Command {
    static SETPRIV: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let setpriv = SETPRIV.get_or_init(|| {
        if cfg!(target_os = "linux") {
            crate::paths::find_on_path("setpriv")
        } else {
            None
        }
    });
    match setpriv {
        Some(setpriv) => {
            let mut command = tokio::process::Command::new(setpriv);
            command.args(["--pdeathsig", "TERM", "--"]).arg(program);
            command
        }
        None => tokio::process::Command::new(program),
    }
}
