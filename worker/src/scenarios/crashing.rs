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
use stress_common::signature::ErrorKind;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader, Lines};

/// The line the child prints before each request it sends.
pub const SENT_LINE: &str = "sent";

pub async fn run(env: &mut TestEnv<'_, '_>) -> Outcome {
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
    let lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    // kill() sends SIGKILL on Unix: the child gets no chance to close its connections cleanly.
    let kill = async {
        let _ = child.kill().await;
    };
    let Counted { sent, ended_early } = count_sent(lines, env.settings.crash_after, kill).await;
    env.stats.requests(env.scenario, &model, sent);
    if ended_early {
        let status = child.wait().await;
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            use tokio::io::AsyncReadExt;
            let _ = e.read_to_string(&mut stderr).await;
        }
        return Outcome::Failed(Failure::new(
            &model,
            "the child to run until it is killed",
            format!("it exited early ({status:?}): {}", stderr.trim()),
        ));
    }
    if sent == 0 {
        return Outcome::Failed(nothing_sent(&model, env.settings.crash_after));
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

/// The child sent no request before it was killed: no answer came in time to its connect or
/// its first request (a slow or unreachable server), which is not a wrong answer.
fn nothing_sent(model: &str, crash_after: Duration) -> Failure {
    Failure::new(
        model,
        "the child to send requests before it is killed",
        format!("no request within {crash_after:?}"),
    )
    .with_kind(ErrorKind::Timeout)
}

/// What the child's stdout said.
#[derive(Debug, PartialEq)]
struct Counted {
    /// The requests it announced ([`SENT_LINE`]).
    sent: u64,
    /// Its output ended before `crash_after`: it exited on its own (it was not killed).
    ended_early: bool,
}

/// How long the killed child's unread lines are read: its pipe ends with it, unless it left a
/// process of its own holding it.
const UNREAD_LINES_LIMIT: Duration = Duration::from_secs(1);

/// Counts the child's [`SENT_LINE`]s until `crash_after`, then (its output still going) kills it
/// with `kill` and counts the lines it printed that were not read yet: each may be a request
/// the server answers, which the reconciliation must find among those whose outcome no worker
/// saw.
async fn count_sent<R: AsyncBufRead + Unpin>(
    mut lines: Lines<R>,
    crash_after: Duration,
    kill: impl Future<Output = ()>,
) -> Counted {
    let mut sent = 0u64;
    let deadline = tokio::time::sleep(crash_after);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => break,
            line = lines.next_line() => match line {
                Ok(Some(l)) if l == SENT_LINE => sent += 1,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return Counted { sent, ended_early: true },
            },
        }
    }
    kill.await;
    let unread = async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line == SENT_LINE {
                sent += 1;
            }
        }
    };
    let _ = tokio::time::timeout(UNREAD_LINES_LIMIT, unread).await;
    Counted {
        sent,
        ended_early: false,
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A network fault held the child's connect past `crash_after`: its failure says so as a
    /// timeout, so a report never counts it among wrong answers (judged from its words alone,
    /// it read as one).
    #[test]
    fn a_child_that_sent_nothing_in_time_timed_out_and_gave_no_wrong_answer() {
        let record = nothing_sent("identity_delay", Duration::from_secs(1)).into_record(
            stress_common::scenario::Scenario::CrashingClient,
            "127.0.0.1:8001",
        );
        assert_eq!(record.error_kind, Some(ErrorKind::Timeout));
    }

    /// Lines the child printed as it was killed, after the deadline, are still counted.
    #[tokio::test]
    async fn the_lines_unread_at_the_kill_are_counted() {
        let (mut child_out, ours) = tokio::io::duplex(1 << 16);
        let kill = async move {
            child_out
                .write_all(format!("{SENT_LINE}\n").repeat(1000).as_bytes())
                .await
                .unwrap();
            drop(child_out);
        };
        let counted = count_sent(BufReader::new(ours).lines(), Duration::ZERO, kill).await;
        assert_eq!(
            counted,
            Counted {
                sent: 1000,
                ended_early: false
            }
        );
    }

    /// Output that ends before the deadline is a child that exited on its own: not killed.
    #[tokio::test]
    async fn output_ending_before_the_deadline_is_an_early_exit() {
        let (mut child_out, ours) = tokio::io::duplex(1 << 16);
        child_out
            .write_all(format!("{SENT_LINE}\nnoise\n{SENT_LINE}\n").as_bytes())
            .await
            .unwrap();
        drop(child_out);
        let kill = async { panic!("a child that exited is not killed") };
        let counted = count_sent(BufReader::new(ours).lines(), Duration::from_secs(60), kill).await;
        assert_eq!(
            counted,
            Counted {
                sent: 2,
                ended_early: true
            }
        );
    }
}
