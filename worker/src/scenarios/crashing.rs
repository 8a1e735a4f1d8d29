//! CrashingClient: a child process (this binary in its hidden `crashing-child` mode) sends
//! requests to the delayed identity model and is SIGKILLed mid-flight; the server must stay live
//! and ready and keep answering. The child's requests are counted from the lines it prints.

use super::timeout::{check_identity, identity_request};
use super::{Failure, Outcome, TestEnv};
use crate::client::{self, Protocol};
use rand::Rng;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The line the child prints before each request it sends.
pub const SENT_LINE: &str = "sent";

pub async fn run(env: &mut TestEnv<'_>) -> Outcome {
    let model = env.settings.identity_model.clone();
    let protocol = env.client.protocol();
    let mut child = match tokio::process::Command::new(&env.settings.worker_binary)
        .args([
            "crashing-child",
            "--server",
            env.client.address(),
            "--protocol",
            protocol.as_str(),
            "--model",
            &model,
            "--delay-ms",
            &env.settings.timeout_delay.as_millis().to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            return Outcome::Failed(Failure::new(
                &model,
                format!("a child process {}", env.settings.worker_binary.display()),
                e.to_string(),
            ));
        }
    };
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let mut sent = 0u64;
    let deadline = tokio::time::sleep(env.settings.crash_after);
    tokio::pin!(deadline);
    let early_exit = loop {
        tokio::select! {
            _ = &mut deadline => break None,
            line = lines.next_line() => match line {
                Ok(Some(l)) if l == SENT_LINE => sent += 1,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break Some(child.wait().await),
            },
        }
    };
    if let Some(status) = early_exit {
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            use tokio::io::AsyncReadExt;
            let _ = e.read_to_string(&mut stderr).await;
        }
        env.stats.requests(env.scenario, &model, sent);
        return Outcome::Failed(Failure::new(
            &model,
            "the child to run until it is killed",
            format!("it exited early ({status:?}): {}", stderr.trim()),
        ));
    }
    // kill() sends SIGKILL on Unix: the child gets no chance to close its connections cleanly.
    let _ = child.kill().await;
    env.stats.requests(env.scenario, &model, sent);
    if sent == 0 {
        return Outcome::Failed(Failure::new(
            &model,
            "the child to send requests before it is killed",
            format!("no request within {:?}", env.settings.crash_after),
        ));
    }
    if let Err(f) = env.check_server_healthy(&model).await {
        return Outcome::Failed(f);
    }
    let values: Vec<i32> = (0..16).map(|_| env.rng.random_range(0..1 << 20)).collect();
    match check_identity(env, &model, &values).await {
        Ok(()) => Outcome::Passed,
        Err(f) => Outcome::Failed(f),
    }
}

/// The child's body: two loops of requests to the delayed model, a line on stdout before each.
/// It never returns on its own; the parent kills it.
pub async fn child_main(
    server: &str,
    protocol: Protocol,
    model: &str,
    delay_ms: i64,
) -> anyhow::Result<()> {
    // Die with the parent: a worker killed mid-test must not leave this loop running.
    #[cfg(target_os = "linux")]
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
    let client = client::connect(protocol, server, true).await?;
    let stdout = Arc::new(tokio::sync::Mutex::new(tokio::io::stdout()));
    let mut loops = tokio::task::JoinSet::new();
    for _ in 0..2 {
        let client = client.clone();
        let stdout = stdout.clone();
        let model = model.to_string();
        loops.spawn(async move {
            use tokio::io::AsyncWriteExt;
            loop {
                {
                    let mut out = stdout.lock().await;
                    out.write_all(format!("{SENT_LINE}\n").as_bytes()).await?;
                    out.flush().await?;
                }
                let mut request = identity_request(&model, &[1, 2, 3, 4], delay_ms);
                request.timeout = Some(Duration::from_secs(30));
                // Errors are expected when the server is disrupted; keep sending, but do not
                // spin (and print thousands of lines) while the server is unreachable.
                if client.infer(&request).await.is_err() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            #[allow(unreachable_code)]
            Ok::<(), std::io::Error>(())
        });
    }
    while let Some(r) = loops.join_next().await {
        r??;
    }
    Ok(())
}
