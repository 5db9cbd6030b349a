//! What the harness does to the simulated disk: crash the process or the machine, arm an
//! I/O fault for the next call of a kind (kept in the state's [`Faults`]), crash at the
//! n-th call from now, and damage a file at rest.

use std::io::{self, ErrorKind};
use std::path::Path;

use super::state::{Faults, SimDisk};

impl SimDisk {
    /// The process dies: everything it saw stays (the kernel still has it), nothing owed
    /// to the disk is paid, and every handle open before fails from now on.
    pub fn crash_process(&self) {
        self.lock().end_process();
    }

    /// The machine loses power: of every change owed to the disk, the seeded generator
    /// decides what had reached it (see `disk/crash.rs`); handles fail from now on.
    pub fn crash_machine(&self) {
        let mut state = self.lock();
        state.lose_power();
        state.end_process();
    }

    /// The next `read_from` fails with EIO.
    pub fn fail_read_next(&self) {
        self.lock().faults.read = true;
    }

    /// The next append fails with EIO, writing nothing.
    pub fn fail_append_next(&self) {
        self.lock().faults.append = true;
    }

    /// The next append writes a prefix of its bytes (its length by the generator, maybe
    /// none) and fails with `StorageFull`.
    pub fn enospc_next_append(&self) {
        self.lock().faults.enospc = true;
    }

    /// The next `sync_data`, `sync_all` or `sync_dir` fails with EIO; what it was to make
    /// durable may or may not have become so (the generator decides).
    pub fn fail_sync_next(&self) {
        self.lock().faults.sync = true;
    }

    /// The next `set_len` fails with EIO, changing nothing.
    pub fn fail_set_len_next(&self) {
        self.lock().faults.set_len = true;
    }

    /// The `n`-th disk call from now (1 is the next; every trait method counts) does not
    /// happen and fails, and so does every call after it, until the harness calls
    /// [`SimDisk::crash_process`] or [`SimDisk::crash_machine`] (which also disarm it).
    pub fn crash_at_call(&self, n: u64) {
        let mut state = self.lock();
        state.faults.crash_at = Some(state.calls + n.max(1));
    }

    /// Every armed fault off (a crash that happened stays, for the harness to carry out).
    pub fn disarm(&self) {
        let mut state = self.lock();
        let crashed = state.faults.crashed;
        state.faults = Faults {
            crashed,
            ..Faults::default()
        };
    }

    /// Whether the last machine crash left garbage in bytes that were never synced.
    pub fn garbled_on_power_loss(&self) -> bool {
        self.lock().garbled
    }

    /// Whether a [`SimDisk::crash_at_call`] crash has happened and awaits the harness.
    pub fn crashed(&self) -> bool {
        self.lock().faults.crashed
    }

    /// Flips bit `bit` (bit `bit % 8` of byte `bit / 8`) of a file: damage at rest, in the
    /// bytes the process sees and, where they are durable, on the disk.
    pub fn flip_bit_at_rest(&self, path: &Path, bit: u64) -> io::Result<()> {
        let mut state = self.lock();
        let inode = state.inode_at(path)?;
        let file = state.inodes.get_mut(&inode).expect("a named inode exists");
        let byte = usize::try_from(bit / 8)
            .ok()
            .filter(|&byte| byte < file.content.len())
            .ok_or_else(|| {
                io::Error::new(
                    ErrorKind::InvalidInput,
                    format!("bit {bit} is beyond the end of {}", path.display()),
                )
            })?;
        file.content[byte] ^= 1 << (bit % 8);
        Ok(())
    }
}
