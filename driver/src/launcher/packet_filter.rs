//! Packet loss for injected network faults (local launcher): iptables rules that drop a random
//! share of the TCP segments to and from a fault proxy's loopback ports (`-m statistic --mode
//! random`, the way the kernel without netem allows). The kernel's TCP retransmits what
//! was dropped, as over a lossy link: clients see stalls and late answers, never a corrupt
//! stream. Only the proxy's ports are hit, so the driver's own probes of the server are not.
//!
//! Rules must not outlive their fault, also when the driver dies: a guardian shell deletes
//! them at the fault's planned end (plus a slack), at once on SIGTERM (the fault's end, or the
//! driver's death through the parent-death signal).

use std::time::Duration;
use tokio::process::{Child, Command};

/// The guardian deletes the rules this long after the fault's planned end, should the driver
/// not have ended it.
const GUARD_SLACK: Duration = Duration::from_secs(5);

/// The rules of one fault: each port's segments, both ways, dropped with `probability`.
#[derive(Debug, Clone, PartialEq)]
pub struct LossRules {
    ports: Vec<u16>,
    probability: f64,
    /// Names the run and the member in `iptables -S` (and finds the rules' counters).
    comment: String,
}

impl LossRules {
    pub fn new(ports: Vec<u16>, probability: f64, comment: &str) -> Self {
        // iptables prints a comment in double quotes and takes no escape in it.
        let comment = comment
            .chars()
            .filter(|c| *c != '"' && *c != '\'' && *c != '\\' && !c.is_control())
            .take(200)
            .collect();
        LossRules {
            ports,
            probability,
            comment,
        }
    }

    /// The iptables arguments of every rule, to insert (`-I`) or delete (`-D`) them. On
    /// loopback every segment passes INPUT: `--dport` catches the clients' segments to the
    /// proxy, `--sport` the proxy's answers.
    pub fn commands(&self, op: &str) -> Vec<Vec<String>> {
        let mut commands = Vec::new();
        for port in &self.ports {
            for side in ["--dport", "--sport"] {
                commands.push(
                    [
                        "-w",
                        op,
                        "INPUT",
                        "-i",
                        "lo",
                        "-p",
                        "tcp",
                        side,
                        &port.to_string(),
                        "-m",
                        "statistic",
                        "--mode",
                        "random",
                        "--probability",
                        &format!("{:.4}", self.probability),
                        "-m",
                        "comment",
                        "--comment",
                        &self.comment,
                        "-j",
                        "DROP",
                    ]
                    .map(String::from)
                    .to_vec(),
                );
            }
        }
        commands
    }

    /// A shell command deleting every rule, each whether or not the others are still there.
    fn delete_script(&self) -> String {
        self.commands("-D")
            .iter()
            .map(|args| {
                let words: Vec<String> = args
                    .iter()
                    .map(|a| stress_common::tritonserver::shell_quote(a))
                    .collect();
                format!("iptables {} 2>/dev/null", words.join(" "))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The packets the rules dropped so far, from `iptables -S INPUT -v` (the `-c PACKETS
    /// BYTES` of each line carrying the rules' comment).
    pub fn dropped_in(&self, listing: &str) -> u64 {
        let quoted = format!("--comment \"{}\"", self.comment);
        let bare = format!("--comment {} ", self.comment);
        listing
            .lines()
            .filter(|l| l.contains(&quoted) || (!self.comment.contains(' ') && l.contains(&bare)))
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                words.find(|w| *w == "-c")?;
                words.next()?.parse::<u64>().ok()
            })
            .sum()
    }
}

/// Whether this machine can drop packets: iptables on the PATH, run by root (None: it can;
/// else what is missing, in words for the bad-input message).
pub fn unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some(
            "dropping packets takes iptables run as root (`-m statistic`); the driver runs \
             as another user"
                .into(),
        );
    }
    match std::process::Command::new("iptables")
        .args(["-w", "-S", "INPUT"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
    {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "dropping packets takes iptables (`-m statistic`), and `iptables -S INPUT` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Some(format!(
            "dropping packets takes iptables (`-m statistic`), which is not runnable here: {e}"
        )),
    }
}

/// Why packet loss could not be put in place.
#[derive(Debug, thiserror::Error)]
pub enum LossError {
    #[error("iptables {command}: {why}")]
    Iptables { command: String, why: String },
    #[error("the packet filter rules' guardian did not start: {0}")]
    Guardian(String),
}

async fn iptables(args: &[String]) -> Result<String, LossError> {
    let failed = |why: String| LossError::Iptables {
        command: args.join(" "),
        why,
    };
    let out = Command::new("iptables")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| failed(e.to_string()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(failed(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}

/// Rules in place, with the guardian that removes them.
pub struct PacketLoss {
    rules: LossRules,
    guardian: Child,
}

impl PacketLoss {
    /// Starts the rules' guardian, which removes them `lasting` (plus a slack) from now at the
    /// latest, then inserts them (none stays when one fails). The guardian is armed (its trap
    /// set) before the first rule exists: a SIGTERM any time after finds rules to delete, never
    /// a shell that dies of it with the rules left in place.
    pub async fn start(rules: LossRules, lasting: Duration) -> Result<Self, LossError> {
        let ticks = (lasting + GUARD_SLACK).as_millis() / 100;
        // `sh -c SCRIPT TICKS DELETE`: short sleeps, so the trap runs within 0.1 s.
        let script = "trap 'eval \"$1\"; exit 0' TERM; echo armed; i=0; \
             while [ $i -lt $0 ]; do sleep 0.1; i=$((i+1)); done; eval \"$1\"";
        let mut guardian = stress_common::shutdown::command_dying_with_parent("sh")
            .args(["-c", script, &ticks.to_string(), &rules.delete_script()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| LossError::Guardian(e.to_string()))?;
        let mut armed = String::new();
        let mut stdout = tokio::io::BufReader::new(guardian.stdout.take().expect("piped"));
        let read = tokio::io::AsyncBufReadExt::read_line(&mut stdout, &mut armed);
        if !matches!(
            tokio::time::timeout(Duration::from_secs(5), read).await,
            Ok(Ok(_))
        ) || armed.trim() != "armed"
        {
            return Err(LossError::Guardian(format!(
                "it said {:?} instead of \"armed\" within 5 s",
                armed.trim()
            )));
        }
        let loss = PacketLoss { rules, guardian };
        for args in loss.rules.commands("-I") {
            if let Err(e) = iptables(&args).await {
                loss.end().await;
                return Err(e);
            }
        }
        Ok(loss)
    }

    /// Asks the guardian to delete the rules now (SIGTERM; nothing once it has ended).
    fn terminate_guardian(&self) {
        if let Some(pid) = self.guardian.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }

    /// Ends the loss: reads how many packets the rules dropped, then has the guardian delete
    /// them and waits for it. None: the count could not be read.
    pub async fn end(mut self) -> Option<u64> {
        let dropped = iptables(&["-w", "-S", "INPUT", "-v"].map(String::from))
            .await
            .ok()
            .map(|listing| self.rules.dropped_in(&listing));
        self.terminate_guardian();
        if tokio::time::timeout(Duration::from_secs(5), self.guardian.wait())
            .await
            .is_err()
        {
            let _ = self.guardian.start_kill();
            for undo in self.rules.commands("-D") {
                let _ = iptables(&undo).await;
            }
        }
        dropped
    }
}

/// Dropped without [`PacketLoss::end`] (a launcher dropped mid-run): its rules go all the same.
impl Drop for PacketLoss {
    fn drop(&mut self) {
        self.terminate_guardian();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_port_is_filtered_both_ways_and_deleted_by_the_same_words() {
        let rules = LossRules::new(vec![4100, 4200], 0.25, "triton-stress run-1 \"triton-0\"");
        let insert = rules.commands("-I");
        assert_eq!(insert.len(), 4);
        let joined: Vec<String> = insert.iter().map(|a| a.join(" ")).collect();
        assert!(joined[0].starts_with("-w -I INPUT -i lo -p tcp --dport 4100 -m statistic"));
        assert!(joined[1].contains("--sport 4100"));
        assert!(joined[3].contains("--sport 4200"));
        assert!(joined[0].contains("--probability 0.2500"), "{}", joined[0]);
        // The quote is gone from the comment: iptables would print it unescaped.
        assert!(joined[0].ends_with("--comment triton-stress run-1 triton-0 -j DROP"));
        let delete = rules.commands("-D");
        for (i, d) in insert.iter().zip(&delete) {
            assert_eq!(i[2..], d[2..]);
            assert_eq!(d[1], "-D");
        }
        assert_eq!(rules.delete_script().matches("iptables -w -D").count(), 4);
    }

    #[test]
    fn the_drop_count_sums_this_fault_s_rules_only() {
        let rules = LossRules::new(vec![4100], 0.3, "triton-stress run-1 triton-0");
        let listing = "-P INPUT ACCEPT -c 10 20\n\
            -A INPUT -i lo -p tcp -m tcp --dport 4100 -m statistic --mode random --probability 0.29999999981 -m comment --comment \"triton-stress run-1 triton-0\" -c 12 720 -j DROP\n\
            -A INPUT -i lo -p tcp -m tcp --sport 4100 -m statistic --mode random --probability 0.29999999981 -m comment --comment \"triton-stress run-1 triton-0\" -c 5 300 -j DROP\n\
            -A INPUT -i lo -p tcp -m tcp --dport 4300 -m statistic --mode random --probability 0.29999999981 -m comment --comment \"triton-stress run-1 triton-1\" -c 99 900 -j DROP\n\
            -A INPUT -j KUBE-FIREWALL -c 1000 2000\n";
        assert_eq!(rules.dropped_in(listing), 17);
        assert_eq!(rules.dropped_in(""), 0);
    }

    async fn listing() -> String {
        iptables(&["-w", "-S", "INPUT"].map(String::from))
            .await
            .unwrap()
    }

    /// On a real packet filter (root only): the rules are in place while the loss lasts, and
    /// gone after its end, or after its guardian's SIGTERM (what the driver's death sends it).
    #[tokio::test]
    async fn the_rules_go_with_the_fault_s_end_and_with_their_guardian() {
        if let Some(why) = unavailable() {
            eprintln!("SKIPPED: {why}");
            return;
        }
        let comment = format!("triton-stress unit-test {}", std::process::id());
        let rules = LossRules::new(vec![1], 0.5, &comment);
        let loss = PacketLoss::start(rules.clone(), Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(listing().await.matches(&comment).count(), 2);
        assert_eq!(loss.end().await, Some(0), "nothing talks to port 1");
        assert!(!listing().await.contains(&comment));

        let mut loss = PacketLoss::start(rules, Duration::from_secs(60))
            .await
            .unwrap();
        assert!(listing().await.contains(&comment));
        let pid = loss.guardian.id().unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        tokio::time::timeout(Duration::from_secs(5), loss.guardian.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(!listing().await.contains(&comment));

        // Dropped mid-fault: the guardian still deletes them.
        let loss = PacketLoss::start(
            LossRules::new(vec![1], 0.5, &comment),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
        drop(loss);
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while listing().await.contains(&comment) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!listing().await.contains(&comment));
    }
}
