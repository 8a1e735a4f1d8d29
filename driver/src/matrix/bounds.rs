//! The limits on a matrix's counts, sizes and durations, in one place: checked where the
//! values are read ([`super::checked`]), or by [`super::validate`] for sizes of lists, all
//! before anything is expanded, allocated or launched (a count of 4294967295
//! instances must not be expanded into members first), and written into the JSON schema's
//! descriptions. The bounds shared with the worker's flags are
//! [`stress_common::limits`].

pub use stress_common::limits::{
    MAX_CONCURRENCY, MAX_DURATION, MAX_POLL_INTERVAL, MAX_RATE, MAX_WAIT, MIN_POLL_INTERVAL,
    MIN_RATE,
};

/// Members (servers and clients) of one run, in all.
pub const MAX_MEMBERS: u64 = 10_000;
/// Poll counts of the fail-fast rules.
pub const MAX_POLLS: u32 = 10_000;
/// A scenario's or a model's weight in a mix.
pub const MAX_WEIGHT: u32 = 1_000_000;
/// An Infer batch size.
pub const MAX_BATCH_SIZE: u32 = 1_000_000;
/// Extra arguments of a template, and the length of each.
pub const MAX_ARGS: usize = 256;
pub const MAX_ARG_LEN: usize = 4096;
/// A capacity group's total concurrency (its workers' streams together).
pub const MAX_GROUP_CONCURRENCY: u32 = 1_000_000;
/// Capacity controller counts (settle periods, stable checks, decreases).
pub const MAX_CHECKS: u32 = 10_000;
/// Triton trace settings: rate (one in N), count and log frequency.
pub const MAX_TRACE_SETTING: u32 = 100_000_000;

/// Host paths a server may not mount writable: the node's root and its system directories.
pub const PROTECTED_HOST_PATHS: &[&str] = &[
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib64",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
    "/var/lib",
    "/var/lib/kubelet",
    "/var/run",
];

/// Whether a writable mount of `host_path` would hand a pod the node: `/`, a system directory
/// or anything under `/proc`, `/sys`, `/dev`, `/etc`, `/boot`, `/var/lib/kubelet`.
pub fn is_protected_host_path(host_path: &str) -> bool {
    let path = host_path.trim_end_matches('/');
    let path = if path.is_empty() { "/" } else { path };
    PROTECTED_HOST_PATHS.contains(&path)
        || [
            "/proc/",
            "/sys/",
            "/dev/",
            "/etc/",
            "/boot/",
            "/var/lib/kubelet/",
        ]
        .iter()
        .any(|p| path.starts_with(p))
        || path.split('/').any(|c| c == "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_s_system_directories_are_protected() {
        for p in [
            "/",
            "//",
            "/etc",
            "/etc/",
            "/proc/1",
            "/var/lib/kubelet/pods",
            "/data/../etc",
        ] {
            assert!(is_protected_host_path(p), "{p}");
        }
        for p in ["/data", "/mnt/models", "/var/tmp/scratch", "/srv"] {
            assert!(!is_protected_host_path(p), "{p}");
        }
    }
}
