//! The store's one error type: an I/O failure naming its file, or damage recovery refuses
//! to start past. Every file of the store reports through it, so that the operator always
//! learns which file failed.

use std::io;
use std::path::{Path, PathBuf};

use super::frame;

/// Why the store could not open, recover or write.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: damaged log at byte offset {offset}: {damage}; refusing to start rather than lose what follows it. Every file is left as it was: `tickd check` reports the damage, and `--recover-truncate` starts from what precedes it, setting the rest aside")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        damage: frame::Damage,
    },
}

/// Turns an I/O error on `path` into a [`StoreError`] naming it: `.map_err(io_error(path))`.
pub(super) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}
