//! A small file of a secret that sinks use (`--sink-token-file`, `--sink-secret-file`),
//! read at start-up and again when its modification time moves: looked at before a push,
//! at most once a second, so that a rotated secret applies within a second and a push
//! costs no file system call. A file that cannot be read or used later keeps the last
//! value, with a warning that names the flag and the path, never the contents.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tracing::warn;

/// How often the file's modification time is looked at, at most.
pub(crate) const LOOKED_AT_EVERY: Duration = Duration::from_secs(1);

/// What a file's contents become; the error names the flag and the file, not the contents.
pub(crate) type Parse<T> = fn(flag: &str, path: &Path, contents: &str) -> Result<T, String>;

pub(crate) struct WatchedFile<T> {
    flag: &'static str,
    path: PathBuf,
    parse: Parse<T>,
    read: Mutex<Read<T>>,
}

/// The file as last read, and when it was last looked at.
struct Read<T> {
    modified: Option<SystemTime>,
    value: Arc<T>,
    looked_at: Instant,
}

impl<T> WatchedFile<T> {
    /// Reads the file given to `flag`, refusing one that cannot be read or used.
    pub(crate) fn read(flag: &'static str, path: &Path, parse: Parse<T>) -> Result<Self, String> {
        Ok(WatchedFile {
            flag,
            path: path.to_owned(),
            parse,
            read: Mutex::new(read(flag, path, parse)?),
        })
    }

    /// The value as the file held it when last looked at.
    pub(crate) fn current(&self) -> Arc<T> {
        self.current_at(Instant::now())
    }

    /// The value at `now`, the file looked at if it was not within [`LOOKED_AT_EVERY`].
    pub(crate) fn current_at(&self, now: Instant) -> Arc<T> {
        let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        if now.saturating_duration_since(read.looked_at) >= LOOKED_AT_EVERY {
            read.looked_at = now;
            let modified = modified(&self.path);
            if modified.is_some() && modified != read.modified {
                match self::read(self.flag, &self.path, self.parse) {
                    Ok(fresh) => *read = fresh,
                    Err(error) => {
                        warn!(%error, flag = self.flag, "keeping what the file held before")
                    }
                }
            }
        }
        read.value.clone()
    }

    #[cfg(test)]
    pub(crate) fn looked_at(&self) -> Instant {
        self.read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .looked_at
    }
}

fn read<T>(flag: &str, path: &Path, parse: Parse<T>) -> Result<Read<T>, String> {
    let contents = std::fs::read_to_string(path)
        .map_err(|error| format!("{flag} {}: {error}", path.display()))?;
    let value = parse(flag, path, &contents)?;
    Ok(Read {
        modified: modified(path),
        value: Arc::new(value),
        looked_at: Instant::now(),
    })
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path)
        .and_then(|metadata| metadata.modified())
        .ok()
}
