//! The local backend's [`SinkStore`]: the sinks set through the API, in `sinks.json` in
//! the data directory. Each change writes the whole file anew (a temporary file, fsync,
//! rename over the old one, fsync of the directory) before it is answered, so a change
//! answered survives a crash and one cut short leaves the previous file whole. The file
//! holds each sink's URL with its credentials: it is created readable by its owner only.
//!
//! With `--sync none` (no data directory) the sinks set at run time are kept in memory
//! only, like the timers, and are gone at the next start.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Map, Value};

use crate::domain::{too_many_sinks, Answer, SinkStore, StoredSinks, TimerError, MAX_SINKS};

/// The file's name in the data directory.
pub(crate) const SINKS_FILE: &str = "sinks.json";

pub(crate) struct LocalSinks {
    /// The file; None with `--sync none`.
    path: Option<PathBuf>,
    /// What the file holds. Changes hold the lock while they write, so they are written
    /// in the order they are made.
    sinks: Mutex<StoredSinks>,
}

impl LocalSinks {
    /// The sinks in memory only.
    pub(crate) fn in_memory() -> Self {
        Self {
            path: None,
            sinks: Mutex::new(StoredSinks::new()),
        }
    }

    /// Reads `sinks.json` in `dir`, if there is one (none: no sink was ever set).
    pub(crate) fn open(dir: &Path) -> Result<Self, String> {
        let path = dir.join(SINKS_FILE);
        let sinks = match fs::read(&path) {
            Ok(bytes) => parse(&bytes).map_err(|why| format!("{}: {why}", path.display()))?,
            Err(error) if error.kind() == io::ErrorKind::NotFound => StoredSinks::new(),
            Err(error) => return Err(format!("reading {}: {error}", path.display())),
        };
        Ok(Self {
            path: Some(path),
            sinks: Mutex::new(sinks),
        })
    }

    /// Applies `change` to a copy of the sinks, writes the copy, and only then keeps it:
    /// a write that fails changes nothing.
    fn change<T>(
        &self,
        change: impl FnOnce(&mut StoredSinks) -> Result<T, TimerError>,
    ) -> Result<T, TimerError> {
        let mut sinks = self.sinks.lock().unwrap_or_else(PoisonError::into_inner);
        let mut changed = sinks.clone();
        let answer = change(&mut changed)?;
        if let Some(path) = &self.path {
            write_atomically(path, &render(&changed)).map_err(|error| {
                TimerError::Unavailable(format!("writing the sinks to {}: {error}", path.display()))
            })?;
        }
        *sinks = changed;
        Ok(answer)
    }
}

impl SinkStore for Arc<LocalSinks> {
    fn load(&self) -> Answer<StoredSinks> {
        let sinks = self.sinks.lock().unwrap_or_else(PoisonError::into_inner);
        Answer::work(std::future::ready(Ok(sinks.clone())))
    }

    fn put(&self, namespace: String, url: String) -> Answer<()> {
        let this = self.clone();
        blocking(move || {
            this.change(|sinks| {
                if !sinks.contains_key(&namespace) && sinks.len() >= MAX_SINKS {
                    return Err(too_many_sinks());
                }
                sinks.insert(namespace, url);
                Ok(())
            })
        })
    }

    fn remove(&self, namespace: String) -> Answer<bool> {
        let this = self.clone();
        blocking(move || {
            let had = this
                .sinks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains_key(&namespace);
            if !had {
                return Ok(false);
            }
            this.change(|sinks| Ok(sinks.remove(&namespace).is_some()))
        })
    }

    fn shared(&self) -> bool {
        false
    }
}

/// Runs file work off the runtime's threads.
fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, TimerError> + Send + 'static,
) -> Answer<T> {
    Answer::work(async move {
        tokio::task::spawn_blocking(work)
            .await
            .unwrap_or_else(|_| Err(TimerError::stopped()))
    })
}

/// `{"sinks": {"namespace": "url", ...}}`.
fn render(sinks: &StoredSinks) -> Vec<u8> {
    let sinks: Map<String, Value> = sinks
        .iter()
        .map(|(namespace, url)| (namespace.clone(), Value::String(url.clone())))
        .collect();
    let mut text = serde_json::to_vec_pretty(&serde_json::json!({ "sinks": sinks }))
        .expect("a map of strings serializes");
    text.push(b'\n');
    text
}

fn parse(bytes: &[u8]) -> Result<StoredSinks, String> {
    let value: Value = serde_json::from_slice(bytes).map_err(|error| error.to_string())?;
    let Some(sinks) = value.get("sinks").and_then(Value::as_object) else {
        return Err("no \"sinks\" object".into());
    };
    sinks
        .iter()
        .map(|(namespace, url)| match url.as_str() {
            Some(url) => Ok((namespace.clone(), url.to_owned())),
            None => Err(format!("the sink of {namespace:?} is not a string")),
        })
        .collect()
}

/// Replaces the file at `path` with `contents`, whole or not at all, durably.
fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let temporary = path.with_extension("json.tmp");
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&temporary)?;
    file.write_all(contents)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&temporary, path)?;
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread")]
    async fn sinks_set_are_read_back_after_a_restart_and_removed_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(LocalSinks::open(dir.path()).unwrap());
        store
            .put("orders".into(), "http://u:p@127.0.0.1:9/x".into())
            .await
            .unwrap();
        store
            .put("billing".into(), "http://127.0.0.1:9/y".into())
            .await
            .unwrap();
        assert!(store.remove("billing".into()).await.unwrap());
        assert!(!store.remove("billing".into()).await.unwrap());
        let again = Arc::new(LocalSinks::open(dir.path()).unwrap());
        let sinks = again.load().await.unwrap();
        assert_eq!(sinks.len(), 1);
        assert_eq!(sinks["orders"], "http://u:p@127.0.0.1:9/x");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn past_the_most_sinks_nothing_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(LocalSinks::open(dir.path()).unwrap());
        for index in 0..MAX_SINKS {
            store
                .sinks
                .lock()
                .unwrap()
                .insert(format!("n{index}"), "http://127.0.0.1/".into());
        }
        let refused = store
            .put("one-more".into(), "http://127.0.0.1/".into())
            .await;
        assert!(matches!(refused, Err(TimerError::ResourceExhausted(_))));
        // Replacing a sink already kept is no new sink.
        store
            .put("n0".into(), "http://127.0.0.1/z".into())
            .await
            .unwrap();
        assert!(!store.load().await.unwrap().contains_key("one-more"));
    }

    #[test]
    fn a_damaged_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(SINKS_FILE), b"{not json").unwrap();
        let refused = LocalSinks::open(dir.path()).err().unwrap();
        assert!(refused.contains(SINKS_FILE), "{refused}");
    }
}
