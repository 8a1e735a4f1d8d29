//! The progress line a run shows while it polls: on a terminal in place, in logs every 10 s.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

pub(super) struct Progress {
    pub(super) tty: bool,
    pub(super) last_line: Instant,
}

impl Progress {
    pub(super) fn show(&mut self, line: &str) {
        if self.tty {
            eprint!("\r\x1b[K{line}");
        } else if self.last_line.elapsed() >= Duration::from_secs(10) {
            tracing::info!("{line}");
            self.last_line = Instant::now();
        }
    }

    pub(super) fn done(&self) {
        if self.tty {
            eprintln!();
        }
    }
}

/// The progress line of a poll: elapsed against the duration, the servers up, then per client
/// group its workers' QPS now and their tests and failures so far.
pub(super) fn progress_line(
    elapsed: Duration,
    duration: Duration,
    servers_up: usize,
    groups: &BTreeMap<String, Vec<stress_common::contract::MemberName>>,
    qps: &[(String, f64)],
    counts: &[(String, stress_common::status::ScenarioCounts)],
) -> String {
    let mut line = format!(
        "[{:>5.0}s/{:.0}s] servers up {servers_up}",
        elapsed.as_secs_f64(),
        duration.as_secs_f64()
    );
    for (group, members) in groups {
        let of_group = |m: &str| members.iter().any(|n| n.as_str() == m);
        let group_qps: f64 = qps
            .iter()
            .filter(|(m, _)| of_group(m))
            .map(|(_, q)| q)
            .sum();
        let (tests, failures) = counts
            .iter()
            .filter(|(m, _)| of_group(m))
            .fold((0, 0), |(t, f), (_, c)| (t + c.tests, f + c.failures));
        line.push_str(&format!(
            " | {group}: {} workers, QPS {group_qps:.0}, tests {tests}, failures {failures}",
            members.len()
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use stress_common::contract::MemberName;
    use stress_common::status::ScenarioCounts;

    #[test]
    pub(super) fn the_progress_line_shows_each_group_s_qps_and_failures() {
        let name = |n: &str| MemberName::new(n);
        let groups: BTreeMap<String, Vec<MemberName>> = [
            ("grpc".to_string(), vec![name("grpc-0"), name("grpc-1")]),
            ("http".to_string(), vec![name("http-0")]),
        ]
        .into();
        let counts = |tests, failures| ScenarioCounts {
            tests,
            failures,
            ..Default::default()
        };
        let line = progress_line(
            Duration::from_secs(12),
            Duration::from_secs(60),
            2,
            &groups,
            &[
                ("grpc-0".into(), 100.0),
                ("grpc-1".into(), 50.4),
                ("http-0".into(), 7.0),
            ],
            &[
                ("grpc-0".into(), counts(5, 1)),
                ("grpc-1".into(), counts(3, 0)),
                ("http-0".into(), counts(2, 2)),
            ],
        );
        assert_eq!(
            line,
            "[   12s/60s] servers up 2 | grpc: 2 workers, QPS 150, tests 8, failures 1 \
             | http: 1 workers, QPS 7, tests 2, failures 2"
        );
    }
}
