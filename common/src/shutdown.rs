//! The one cancellation token of a process, fired by the first SIGTERM or SIGINT.

use tokio_util::sync::CancellationToken;

pub fn token_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let fired = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("installing a SIGTERM handler");
            tokio::select! {
                _ = ctrl_c => tracing::info!("SIGINT received, stopping"),
                _ = term.recv() => tracing::info!("SIGTERM received, stopping"),
            }
        }
        #[cfg(not(unix))]
        {
            let _ = ctrl_c.await;
        }
        fired.cancel();
    });
    token
}
