//! The limits the fail-fast rules apply, fixed by the plan from the matrix's `fail_fast` and
//! `poll_interval`; `crate::judge::failfast` applies them.

use std::time::Duration;

/// The limits the rules apply (from the matrix's `fail_fast` and `poll_interval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// A heartbeat older than this fails its client.
    pub heartbeat_limit: Duration,
    /// How long a running client may take to its first heartbeat.
    pub startup_grace: Duration,
    /// Consecutive zero-QPS samples that fail a client; 0: never.
    pub zero_qps_polls: u32,
    /// How long a server may hold a client's calls with none of them ending: the zero-QPS
    /// window (`zero_qps_polls` polls) less half a poll, so that the worker's snapshots, taken
    /// at the poll's pace, show it at the same sample as the zero-QPS count. Zero: never.
    pub unanswered_limit: Duration,
    /// How long the store may be unreadable before the run fails for it.
    pub store_outage_limit: Duration,
    /// Consecutive failed liveness probes that fail an external server.
    pub server_probe_failures: u32,
}

/// Consecutive failed liveness probes (one a poll) that fail an external server: one failed
/// probe may be a dropped packet or a pause; three are a server that is gone or hung. With the
/// default 1 s poll and the probes' 1 s limit that is about 3 s, inside the 5 s fail-fast bound.
pub const SERVER_PROBE_FAILURES: u32 = 3;

impl Rules {
    /// The driver's rules for a matrix: a worker must show its first heartbeat within 15 s of
    /// running (or the heartbeat limit, if longer); the store may be out for 60 s (or the
    /// heartbeat limit, if longer).
    pub fn new(poll: Duration, heartbeat_timeout_polls: u32, zero_qps_polls: u32) -> Self {
        let heartbeat_limit = poll.saturating_mul(heartbeat_timeout_polls);
        Rules {
            heartbeat_limit,
            startup_grace: Duration::from_secs(15).max(heartbeat_limit),
            zero_qps_polls,
            unanswered_limit: if zero_qps_polls == 0 {
                Duration::ZERO
            } else {
                poll.saturating_mul(zero_qps_polls).saturating_sub(poll / 2)
            },
            store_outage_limit: Duration::from_secs(60).max(heartbeat_limit),
            server_probe_failures: SERVER_PROBE_FAILURES,
        }
    }
}

impl Rules {
    /// The matrix's store outage limit (never shorter than the heartbeat limit: a store that is
    /// back must have had time to show the heartbeats).
    pub fn with_store_outage_limit(self, limit: Duration) -> Self {
        Rules {
            store_outage_limit: limit.max(self.heartbeat_limit),
            ..self
        }
    }
}
