//! A small tmpfs mounted for a test that needs a disk that fills up (root only).

use std::path::Path;
use std::process::{Command, Stdio};

/// A tmpfs of `size` mounted on `dir` until dropped.
pub(crate) struct Tmpfs<'a>(&'a Path);

impl<'a> Tmpfs<'a> {
    /// None where this machine lets no one mount (not root, or a container without the
    /// capability).
    pub(crate) fn mount(dir: &'a Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .ok()?;
        status.success().then_some(Tmpfs(dir))
    }
}

impl Drop for Tmpfs<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}
