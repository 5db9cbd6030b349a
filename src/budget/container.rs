//! The default memory budget: a share of the memory tickd may really use, which is its
//! container's memory limit when it has one (a Kubernetes `resources.limits.memory`), else
//! the machine's physical memory. Found without being told, so a sidecar given a memory
//! limit gets refusals instead of an OOM kill with no flag at all.
//!
//! The limit is read from the cgroup tickd runs in (`/proc/self/cgroup`): cgroup v2's
//! `memory.max`, or v1's `memory.limit_in_bytes` (and the `hierarchical_memory_limit`
//! that folds in its parents'), in its own group and every group above it (the tightest
//! counts), and never taken above physical memory.

use std::fs;
use std::path::{Path, PathBuf};

use super::memory::BudgetSource;
use super::size::ByteCount;

/// The share of the limit the budget takes by default, in percent. The rest is the
/// process itself: its runtime and threads, request and response buffers, the log's
/// write buffers, allocator slack, and the page cache a cgroup also charges (reclaimable,
/// but better not fought over).
pub const DEFAULT_SHARE_PERCENT: u64 = 50;

/// Where to look; the defaults are the real paths, tests point them at a fake layout.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The cgroup file system's mount (`/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// This process's cgroup membership (`/proc/self/cgroup`).
    pub self_cgroup: PathBuf,
    /// For physical memory (`/proc/meminfo`).
    pub meminfo: PathBuf,
}

impl Default for Probe {
    fn default() -> Self {
        Self {
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
            self_cgroup: PathBuf::from("/proc/self/cgroup"),
            meminfo: PathBuf::from("/proc/meminfo"),
        }
    }
}

/// What bounds tickd's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryLimit {
    pub bytes: u64,
    /// "the container's memory limit" (with the file it came from) or "physical memory".
    pub what: String,
}

impl MemoryLimit {
    /// The default budget: [`DEFAULT_SHARE_PERCENT`] of this limit (0, no budget, only when
    /// not even physical memory could be read).
    pub fn default_budget(&self) -> (u64, BudgetSource) {
        if self.bytes == 0 {
            return (0, BudgetSource::Off);
        }
        let budget = (u128::from(self.bytes) * u128::from(DEFAULT_SHARE_PERCENT) / 100) as u64;
        let what = format!(
            "{DEFAULT_SHARE_PERCENT}% of {} {}",
            ByteCount(self.bytes),
            self.what
        );
        (budget, BudgetSource::Derived { what })
    }
}

/// Values at or above this mean "no limit" (v1 writes 2^63 rounded down to a page).
const UNLIMITED_FROM: u64 = 1 << 62;

impl Probe {
    /// The tightest limit on this process's memory, and what it is.
    pub fn memory_limit(&self) -> MemoryLimit {
        let physical = self.physical_memory();
        match self.container_limit() {
            Some((bytes, file)) if physical.is_none_or(|physical| bytes < physical) => {
                MemoryLimit {
                    bytes,
                    what: format!("the container's memory limit ({})", file.display()),
                }
            }
            _ => MemoryLimit {
                bytes: physical.unwrap_or(0),
                what: "physical memory".to_owned(),
            },
        }
    }

    fn physical_memory(&self) -> Option<u64> {
        let meminfo = fs::read_to_string(&self.meminfo).ok()?;
        let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib.saturating_mul(1024))
    }

    /// The tightest cgroup memory limit over this process's group and its ancestors.
    fn container_limit(&self) -> Option<(u64, PathBuf)> {
        let membership = fs::read_to_string(&self.self_cgroup).unwrap_or_default();
        let mut tightest: Option<(u64, PathBuf)> = None;
        let mut consider = |found: Option<(u64, PathBuf)>| {
            if let Some((bytes, file)) = found {
                if tightest.as_ref().is_none_or(|(best, _)| bytes < *best) {
                    tightest = Some((bytes, file));
                }
            }
        };
        for line in membership.lines() {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = match (fields.next(), fields.next(), fields.next()) {
                (Some(id), Some(controllers), Some(path)) => (id, controllers, path),
                _ => continue,
            };
            if controllers.is_empty() {
                // cgroup v2: one hierarchy at the mount.
                consider(self.tightest_in(&self.cgroup_root, path, &["memory.max"]));
            } else if controllers.split(',').any(|name| name == "memory") {
                let root = self.cgroup_root.join("memory");
                consider(self.tightest_in(&root, path, &["memory.limit_in_bytes"]));
                consider(hierarchical_v1_limit(&root.join(relative(path))));
            }
        }
        // No membership to go by (or a private cgroup namespace whose paths do not match):
        // the mount's own files are this process's group.
        consider(read_limit(&self.cgroup_root.join("memory.max")));
        consider(read_limit(
            &self.cgroup_root.join("memory/memory.limit_in_bytes"),
        ));
        tightest
    }

    /// The tightest of `files` in the group at `path` under `root` and every group above it.
    fn tightest_in(&self, root: &Path, path: &str, files: &[&str]) -> Option<(u64, PathBuf)> {
        let group = root.join(relative(path));
        group
            .ancestors()
            .take_while(|dir| dir.starts_with(root))
            .flat_map(|dir| files.iter().map(move |file| dir.join(file)))
            .filter_map(|file| read_limit(&file))
            .min_by_key(|(bytes, _)| *bytes)
    }
}

fn relative(path: &str) -> &str {
    path.trim_start_matches('/')
}

/// A limit file's value, if it states a limit (`max` and v1's huge values do not).
fn read_limit(file: &Path) -> Option<(u64, PathBuf)> {
    let text = fs::read_to_string(file).ok()?;
    let bytes: u64 = text.trim().parse().ok()?;
    (bytes > 0 && bytes < UNLIMITED_FROM).then(|| (bytes, file.to_owned()))
}

/// cgroup v1 folds the parents' limits into `memory.stat`'s `hierarchical_memory_limit`.
fn hierarchical_v1_limit(group: &Path) -> Option<(u64, PathBuf)> {
    let file = group.join("memory.stat");
    let stat = fs::read_to_string(&file).ok()?;
    let value = stat
        .lines()
        .find_map(|line| line.strip_prefix("hierarchical_memory_limit "))?;
    let bytes: u64 = value.trim().parse().ok()?;
    (bytes > 0 && bytes < UNLIMITED_FROM).then_some((bytes, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(dir: &Path, membership: &str, mem_total_kib: u64) -> Probe {
        fs::write(dir.join("self-cgroup"), membership).unwrap();
        fs::write(
            dir.join("meminfo"),
            format!("MemTotal:       {mem_total_kib} kB\nMemFree: 1 kB\n"),
        )
        .unwrap();
        Probe {
            cgroup_root: dir.join("cgroup"),
            self_cgroup: dir.join("self-cgroup"),
            meminfo: dir.join("meminfo"),
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tickd-budget-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn cgroup_v2_takes_the_tightest_limit_of_the_group_and_its_parents() {
        let dir = scratch("v2");
        let group = dir.join("cgroup/kubepods/pod1/tickd");
        fs::create_dir_all(&group).unwrap();
        fs::write(dir.join("cgroup/kubepods/memory.max"), "1073741824\n").unwrap();
        fs::write(dir.join("cgroup/kubepods/pod1/memory.max"), "268435456\n").unwrap();
        fs::write(group.join("memory.max"), "max\n").unwrap();
        let probe = probe(&dir, "0::/kubepods/pod1/tickd\n", 16 << 20);
        let limit = probe.memory_limit();
        assert_eq!(limit.bytes, 256 << 20);
        assert!(limit.what.contains("pod1/memory.max"), "{}", limit.what);
        let (budget, source) = probe.memory_limit().default_budget();
        assert_eq!(budget, 128 << 20);
        assert!(
            matches!(source, BudgetSource::Derived { what } if what.contains("50% of 256.0 MiB"))
        );
    }

    #[test]
    fn cgroup_v1_reads_limit_in_bytes_and_ignores_its_unlimited_value() {
        let dir = scratch("v1");
        let group = dir.join("cgroup/memory/docker/abc");
        fs::create_dir_all(&group).unwrap();
        fs::write(group.join("memory.limit_in_bytes"), "536870912\n").unwrap();
        fs::write(
            dir.join("cgroup/memory/memory.limit_in_bytes"),
            "9223372036854771712\n",
        )
        .unwrap();
        let probe = probe(&dir, "4:memory:/docker/abc\n1:cpu:/docker/abc\n", 16 << 20);
        assert_eq!(probe.memory_limit().bytes, 512 << 20);
    }

    #[test]
    fn without_a_container_limit_or_above_physical_memory_physical_memory_counts() {
        let dir = scratch("physical");
        fs::create_dir_all(dir.join("cgroup")).unwrap();
        fs::write(dir.join("cgroup/memory.max"), "68719476736\n").unwrap();
        let probe = probe(&dir, "0::/\n", 1 << 20);
        let limit = probe.memory_limit();
        assert_eq!(
            (limit.bytes, limit.what.as_str()),
            (1 << 30, "physical memory")
        );
        assert_eq!(probe.memory_limit().default_budget().0, 512 << 20);
    }
}
