//! A pod container's memory (a server's, for the report's memory judge) and CPU use (a silent
//! worker's, for its verdict): the kernel's own accounting of the container's cgroup, read by
//! `exec` (`cat`, no shell) in the container.
//!
//! What counts is anonymous plus shared memory (`anon` + `shmem` in cgroup v2's memory.stat,
//! `total_rss` + `total_shmem` in v1's): the heap of tritonserver and its python backend stubs
//! and their /dev/shm regions, where a model's leak shows; not the page cache, which grows
//! with every file read and is given back under pressure. This is the container's resident
//! memory, the pod counterpart of a local server's process-tree RSS.
//!
//! The container's memory limit comes with it (v2's memory.max, v1's memory.limit_in_bytes):
//! where a leak leads, an OOM kill at that limit.
//!
//! `exec` needs `pods/exec` (create, get) in the run's namespace, where the driver already creates
//! pods that run any command, so it grants nothing new. Without it the samples carry no
//! memory and the report says memory was not sampled.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// What `exec` runs: the exec'd process's own cgroup (so a v2 container that sees the host's
/// hierarchy is told apart), then both hierarchies' memory.stat and limit (one of each pair
/// exists).
const READ_COMMAND: [&str; 6] = [
    "cat",
    "/proc/self/cgroup",
    "/sys/fs/cgroup/memory.stat",
    "/sys/fs/cgroup/memory.max",
    "/sys/fs/cgroup/memory/memory.stat",
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
];
/// What `exec` runs for the CPU: the container's main process's /proc/1/stat (its state), the
/// cgroup's throttling (v2's cpu.stat, or v1's where hosts mount the pair as `cpu,cpuacct` with
/// `cpu` and `cpuacct` linked to it), then the schedstat of every thread of the container's
/// processes but the reading shell (their own CPU time, in ns: the cgroup's usage would count
/// the exec'd processes too, milliseconds each, as much as a lightly loaded worker's; a
/// foreign client's program is the worker's child). It needs a shell: an image without `sh`
/// gives no reading.
const CPU_COMMAND: [&str; 3] = [
    "sh",
    "-c",
    "cat /proc/self/cgroup /proc/1/stat /sys/fs/cgroup/cpu.stat \
     /sys/fs/cgroup/cpu,cpuacct/cpu.stat 2>/dev/null; \
     for p in /proc/[0-9]*; do [ \"${p#/proc/}\" = \"$$\" ] || cat \"$p\"/task/*/schedstat; \
     done 2>/dev/null",
];

/// A v1 limit at or above this is "no limit" (the kernel writes 2^63 rounded to a page).
const NO_LIMIT: u64 = 1 << 60;

/// Output beyond this is not memory.stat (it has ~40 short lines).
const READ_LIMIT: u64 = 64 * 1024;

/// A container's memory as its cgroup counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerMemory {
    /// Anonymous plus shared memory, bytes.
    pub resident: u64,
    /// The cgroup's limit, bytes (None: unlimited).
    pub limit: Option<u64>,
}

/// Reads one pod container's memory (cheap to clone: the sampler keeps one per server).
#[derive(Clone)]
pub struct PodMemory(Arc<Target>);

struct Target {
    pods: Api<Pod>,
    pod: String,
    container: String,
    /// A failed read is logged once per server, not at every sample.
    warned: AtomicBool,
}

impl std::fmt::Debug for PodMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pod {} container {}", self.0.pod, self.0.container)
    }
}

impl PodMemory {
    pub fn new(pods: Api<Pod>, pod: &str, container: &str) -> Self {
        Self(Arc::new(Target {
            pods,
            pod: pod.to_string(),
            container: container.to_string(),
            warned: AtomicBool::new(false),
        }))
    }

    pub fn same_container(&self, other: &PodMemory) -> bool {
        (&self.0.pod, &self.0.container) == (&other.0.pod, &other.0.container)
    }

    /// The container's memory now (None: not read now; the first failure is logged with its
    /// reason).
    pub async fn memory(&self) -> Option<ContainerMemory> {
        match self.read().await {
            Ok(memory) => Some(memory),
            Err(why) => {
                if !self.0.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "the memory of pod {} (container {}) is not sampled: {why}",
                        self.0.pod,
                        self.0.container
                    );
                }
                None
            }
        }
    }

    async fn read(&self) -> Result<ContainerMemory, CgroupReadError> {
        let text = cat(&self.0.pods, &self.0.pod, &self.0.container, &READ_COMMAND).await?;
        Ok(container_memory(&text)?)
    }
}

/// `command` (a `cat` of cgroup files) run in the container; its output, whatever `cat` said
/// of the files that are not there (one hierarchy of each pair is not).
async fn cat(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
    command: &[&str],
) -> Result<String, CgroupReadError> {
    let params = AttachParams::default()
        .container(container)
        .stdin(false)
        .stdout(true)
        .stderr(false);
    let mut process = pods
        .exec(pod, command.iter().copied(), &params)
        .await
        .map_err(CgroupReadError::Exec)?;
    let mut text = String::new();
    if let Some(stdout) = process.stdout() {
        stdout
            .take(READ_LIMIT)
            .read_to_string(&mut text)
            .await
            .map_err(CgroupReadError::Output)?;
    }
    let _ = process.join().await;
    Ok(text)
}

/// The CPU a pod container has used, and how long its CPU limit held it back, so far (None:
/// not readable; why is logged at debug). For telling a starved worker from a hung one.
pub async fn container_cpu_now(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
) -> Option<crate::launcher::CpuUse> {
    let read = async {
        let text = cat(pods, pod, container, &CPU_COMMAND).await?;
        Ok::<_, CgroupReadError>(container_cpu(&text)?)
    };
    read.await
        .inspect_err(|why| tracing::debug!("the CPU use of pod {pod} is not read: {why}"))
        .ok()
}

/// Why a container's cgroup was not read.
#[derive(Debug, thiserror::Error)]
enum CgroupReadError {
    #[error("exec failed: {0}")]
    Exec(kube::Error),
    #[error("reading its output: {0}")]
    Output(std::io::Error),
    #[error(transparent)]
    Unreadable(#[from] UnreadableMemory),
    #[error(transparent)]
    UnreadableCpu(#[from] UnreadableCpu),
}

/// Why [`READ_COMMAND`]'s output does not tell the container's memory.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UnreadableMemory {
    #[error(
        "the container sees the host's cgroup hierarchy (it is at {0}), so \
         /sys/fs/cgroup/memory.stat is not its own"
    )]
    HostHierarchy(String),
    #[error("no memory.stat with anon/shmem (cgroup v2) or rss/shmem (v1) in the container: {0:?}")]
    NoMemoryStat(String),
}

/// The container's anonymous plus shared memory and its limit from [`READ_COMMAND`]'s output
/// (`/proc/self/cgroup`, then memory.stat and the limit of v2 or v1); an error says why it
/// cannot be told.
pub fn container_memory(output: &str) -> Result<ContainerMemory, UnreadableMemory> {
    let mut own_v2_path = None;
    let mut stat = std::collections::BTreeMap::new();
    let mut limit = None;
    for line in output.lines() {
        // /proc/self/cgroup lines are `id:controllers:path`, memory.stat lines `key value`,
        // and a limit is one word: bytes, or v2's `max`.
        if let Some(path) = line.strip_prefix("0::") {
            own_v2_path = Some(path.trim());
        } else if line.contains(':') {
            continue;
        } else if let Some((key, value)) = line.split_once(' ') {
            if let Ok(value) = value.trim().parse::<u64>() {
                stat.insert(key, value);
            }
        } else if let Ok(bytes) = line.trim().parse::<u64>() {
            limit = (bytes < NO_LIMIT).then_some(bytes);
        }
    }
    let memory = |resident: u64| ContainerMemory { resident, limit };
    if let (Some(anon), Some(shmem)) = (stat.get("anon"), stat.get("shmem")) {
        // cgroup v2: /sys/fs/cgroup is the container's own only in a cgroup namespace of its
        // own, where the process sees itself at the root.
        return match own_v2_path {
            Some("/") | None => Ok(memory(anon + shmem)),
            Some(path) => Err(UnreadableMemory::HostHierarchy(path.into())),
        };
    }
    match (
        stat.get("total_rss").or(stat.get("rss")),
        stat.get("total_shmem").or(stat.get("shmem")),
    ) {
        (Some(rss), Some(shmem)) => Ok(memory(rss + shmem)),
        _ => Err(UnreadableMemory::NoMemoryStat(
            output.chars().take(200).collect(),
        )),
    }
}

/// Why [`CPU_COMMAND`]'s output does not tell the container's CPU use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("no /proc/1/stat and schedstat lines in the container's output: {0:?}")]
pub struct UnreadableCpu(String);

/// The container's main process's CPU use and the cgroup's throttling from [`CPU_COMMAND`]'s
/// output: v2's `throttled_usec` or v1's `throttled_time` (ns); none where the container sees
/// the host's v2 hierarchy (its cpu.stat is not its own).
pub fn container_cpu(output: &str) -> Result<crate::launcher::CpuUse, UnreadableCpu> {
    let mut stat = std::collections::BTreeMap::new();
    let mut own_v2_path = None;
    for line in output.lines() {
        if let Some(path) = line.strip_prefix("0::") {
            own_v2_path = Some(path.trim());
        } else if let Some((key, value)) = line.split_once(' ')
            && let Ok(value) = value.trim().parse::<u64>()
        {
            stat.insert(key, value);
        }
    }
    let mut cpu = crate::launcher::CpuUse::from_proc(output)
        .ok_or_else(|| UnreadableCpu(output.chars().take(200).collect()))?;
    cpu.throttled = match (stat.get("throttled_usec"), stat.get("throttled_time")) {
        (Some(_), _) if !matches!(own_v2_path, Some("/") | None) => None,
        (Some(&us), _) => Some(Duration::from_micros(us)),
        (None, Some(&ns)) => Some(Duration::from_nanos(ns)),
        (None, None) => None,
    };
    Ok(cpu)
}

#[cfg(test)]
mod tests {
    use super::{ContainerMemory, UnreadableMemory, container_cpu, container_memory};
    use crate::launcher::CpuUse;
    use std::time::Duration;

    fn resident(output: &str) -> Result<u64, UnreadableMemory> {
        container_memory(output).map(|m| m.resident)
    }

    /// Real output, cut short: a containerd container on cgroup v2 with its own namespace.
    const V2: &str = "0::/\nanon 104857600\nfile 52428800\nkernel 1048576\nshmem 2097152\n\
                      file_mapped 4096\nanon_thp 0\ninactive_anon 0\n1073741824\n";
    /// A cgroup v1 container (hybrid host): no cgroup namespace, so its paths are the host's,
    /// and /sys/fs/cgroup/memory is its own cgroup all the same.
    const V1: &str = "12:memory:/kubepods/burstable/pod1/abc\n0::/kubepods/burstable/pod1/abc\n\
                      cache 8192\nrss 73400320\nrss_huge 0\nshmem 1048576\nmapped_file 0\n\
                      total_cache 8192\ntotal_rss 73400320\ntotal_shmem 1048576\n\
                      9223372036854771712\n";

    #[test]
    fn anonymous_and_shared_memory_count_and_the_page_cache_does_not() {
        assert_eq!(resident(V2), Ok(104857600 + 2097152));
        assert_eq!(resident(V1), Ok(73400320 + 1048576));
        // v1's total_ figures include child cgroups: preferred where both are there.
        let nested = V1.replace("total_rss 73400320", "total_rss 80000000");
        assert_eq!(resident(&nested), Ok(80000000 + 1048576));
    }

    #[test]
    fn the_limit_is_read_and_unlimited_is_none() {
        assert_eq!(
            container_memory(V2),
            Ok(ContainerMemory {
                resident: 104857600 + 2097152,
                limit: Some(1 << 30)
            })
        );
        assert_eq!(
            container_memory(&V2.replace("1073741824", "max"))
                .unwrap()
                .limit,
            None
        );
        // v1 without a limit: 2^63 rounded down to a page.
        assert_eq!(container_memory(V1).unwrap().limit, None);
        let limited = V1.replace("9223372036854771712", "2147483648");
        assert_eq!(container_memory(&limited).unwrap().limit, Some(2 << 30));
    }

    #[test]
    fn a_v2_container_that_sees_the_hosts_hierarchy_is_not_read() {
        let host_view = V2.replace("0::/\n", "0::/kubepods.slice/pod1/abc\n");
        let err = container_memory(&host_view).unwrap_err().to_string();
        assert!(err.contains("host's cgroup hierarchy"), "{err}");
    }

    #[test]
    fn output_without_memory_stat_is_an_error_that_shows_it() {
        let err =
            container_memory("0::/\ncat: /sys/fs/cgroup/memory.stat: No such file\n").unwrap_err();
        assert!(err.to_string().contains("no memory.stat"), "{err}");
        assert!(container_memory("").is_err());
    }

    /// The worker's /proc/1/stat (sleeping; 150 ticks, which are not read) and its two
    /// threads' schedstat: 1.2 s and 0.3 s on a CPU.
    const STAT: &str = "1 (worker) S 0 1 1 0 -1 4194560 5000 0 0 0 120 30 0 0 20 0 9 0 100 \
                        1000000 2000 18446744073709551615\n1200000000 5000 90\n300000000 700 12";
    /// cgroup v2 (own namespace): cpu.stat in µs, as a 6.x kernel writes it.
    fn v2() -> String {
        format!(
            "0::/\n{STAT}\nusage_usec 1500000\nuser_usec 1200000\nsystem_usec 300000\n\
             nr_periods 40\nnr_throttled 25\nthrottled_usec 2400000\nnr_bursts 0\nburst_usec 0\n"
        )
    }
    /// cgroup v1: cpu.stat with throttled_time in ns.
    fn v1() -> String {
        format!(
            "4:cpu,cpuacct:/kubepods/burstable/pod1/abc\n0::/kubepods/burstable/pod1/abc\n\
             {STAT}\nnr_periods 40\nnr_throttled 25\nthrottled_time 2400000000\n"
        )
    }

    #[test]
    fn the_main_process_s_cpu_and_the_cgroup_s_throttling_are_read_from_either_hierarchy() {
        let expected = CpuUse {
            used: Duration::from_millis(1500),
            throttled: Some(Duration::from_millis(2400)),
            stopped: false,
        };
        assert_eq!(container_cpu(&v2()), Ok(expected));
        assert_eq!(container_cpu(&v1()), Ok(expected));
        // No CPU controller's cpu.stat: the CPU time without the throttling.
        let unthrottled = v1().split("nr_periods").next().unwrap().to_string();
        assert_eq!(container_cpu(&unthrottled).unwrap().throttled, None);
        // A v2 container that sees the host's hierarchy: that cpu.stat is not its own.
        let host_view = v2().replace("0::/\n", "0::/kubepods.slice/pod1/abc\n");
        assert_eq!(container_cpu(&host_view).unwrap().throttled, None);
        // A stopped worker (SIGSTOP: state T) says so.
        let stopped = v2().replace("(worker) S", "(worker) T");
        assert!(container_cpu(&stopped).unwrap().stopped);
    }

    #[test]
    fn cpu_without_the_main_process_s_stat_is_not_read() {
        let err = container_cpu("0::/\nthrottled_usec 5\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no /proc/1/stat"), "{err}");
        // An image without a shell: the exec gives nothing.
        assert!(container_cpu("").is_err());
    }
}
