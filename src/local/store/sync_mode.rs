//! How often the interval mode of `--sync` syncs. The mode itself, [`SyncMode`], is a
//! flag's value, defined with the configuration and re-exported by the store.

use std::time::Duration;

#[cfg(doc)]
use crate::config::SyncMode;

/// How often `--sync interval` fsyncs.
pub(crate) const SYNC_INTERVAL: Duration = Duration::from_millis(10);
