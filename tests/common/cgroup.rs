//! A throwaway memory cgroup, child of the test's own, to run `tickd` as a container with a
//! memory limit runs it: the kernel OOM-kills it if it passes the limit, and the group's
//! count of OOM kills says whether that happened. cgroup v1 (`memory.limit_in_bytes`) and
//! v2 (`memory.max`, the memory controller enabled for children) are both handled.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};

pub(crate) struct MemoryCgroup {
    dir: PathBuf,
    /// The file counting OOM kills, and the name of its line.
    events: (PathBuf, &'static str),
}

impl MemoryCgroup {
    /// A new group limited to `limit` bytes (no swap), or why one cannot be made here.
    pub(crate) fn create(name: &str, limit: u64) -> Result<Self, String> {
        let membership = fs::read_to_string("/proc/self/cgroup")
            .map_err(|error| format!("/proc/self/cgroup: {error}"))?;
        let v1 = membership.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            controllers
                .split(',')
                .any(|controller| controller == "memory")
                .then(|| path.trim_start_matches('/').to_owned())
        });
        let group_name = format!("{name}-{}", std::process::id());
        let group = match &v1 {
            Some(path) => {
                let dir = PathBuf::from("/sys/fs/cgroup/memory")
                    .join(path)
                    .join(&group_name);
                Self::make(&dir)?;
                write(&dir, "memory.limit_in_bytes", limit)?;
                // Only where swap accounting exists; without it there is no swap to fall to.
                let _ = write(&dir, "memory.memsw.limit_in_bytes", limit);
                MemoryCgroup {
                    events: (dir.join("memory.oom_control"), "oom_kill"),
                    dir,
                }
            }
            None => {
                let path = membership
                    .lines()
                    .find_map(|line| line.strip_prefix("0::"))
                    .ok_or("no cgroup v1 memory controller and no cgroup v2 membership")?;
                let parent = PathBuf::from("/sys/fs/cgroup").join(path.trim_start_matches('/'));
                // Children get a memory controller only if the parent hands it down.
                let _ = fs::write(parent.join("cgroup.subtree_control"), "+memory");
                let dir = parent.join(&group_name);
                Self::make(&dir)?;
                write(&dir, "memory.max", limit)?;
                let _ = write(&dir, "memory.swap.max", 0);
                MemoryCgroup {
                    events: (dir.join("memory.events"), "oom_kill"),
                    dir,
                }
            }
        };
        Ok(group)
    }

    fn make(dir: &PathBuf) -> Result<(), String> {
        let _ = fs::remove_dir(dir);
        fs::create_dir(dir).map_err(|error| format!("creating {}: {error}", dir.display()))
    }

    /// `command` (from `tickd_command`), started inside this group: a shell moves itself in,
    /// then execs the command, so tickd never runs a moment outside it. The program, its
    /// arguments and the variables it sets carry over, with piped output; a cleared
    /// environment, a working directory or other output are the caller's to set again.
    pub(crate) fn wrap(&self, command: &Command) -> Command {
        let procs = self.dir.join("cgroup.procs");
        let mut wrapped = Command::new("/bin/sh");
        wrapped
            .arg("-c")
            .arg(format!(
                "echo $$ > '{}' && exec \"$0\" \"$@\"",
                procs.display()
            ))
            .arg(command.get_program())
            .args(command.get_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in command.get_envs() {
            match value {
                Some(value) => wrapped.env(key, value),
                None => wrapped.env_remove(key),
            };
        }
        wrapped
    }

    /// Processes the kernel OOM-killed in this group so far.
    pub(crate) fn oom_kills(&self) -> u64 {
        let (file, field) = &self.events;
        fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0)
    }
}

fn write(dir: &std::path::Path, file: &str, value: u64) -> Result<(), String> {
    fs::write(dir.join(file), value.to_string())
        .map_err(|error| format!("writing {}/{file}: {error}", dir.display()))
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // The test's daemons are killed before this; a group with no process is removed.
        let _ = fs::remove_dir(&self.dir);
    }
}
