//! Reloading the files tickd reads at start-up and may be handed anew while it runs: the
//! TLS certificate, key and client CA ([`super::tls`]) and the token file
//! ([`crate::api::auth`]).
//!
//! A reload happens on SIGHUP, and when the files' contents change (read again every
//! `--reload-interval`; comparing contents rather than modification times also sees
//! Kubernetes' swap of a mounted Secret's symlink). New contents are checked whole before
//! they replace the old: a file that cannot be read or parsed, or a key that is not the
//! certificate's, is refused with a warning and the previous contents stay in force.
//! Nothing already open is touched: connections keep their TLS session, and a token is
//! checked at each call.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::api::auth::{Authenticator, Tokens};

/// Something loaded from files that can be replaced while tickd runs.
pub(crate) trait Reloadable: Send + Sync {
    /// What it is, in log lines ("tls certificate", "token file").
    fn what(&self) -> &'static str;
    /// The files it is loaded from, in the order [`Reloadable::replace`] takes them.
    fn files(&self) -> Vec<PathBuf>;
    /// Builds from the files' contents and, if that succeeds, takes the place of what was
    /// in force. The success says what was loaded (for the log; never a secret).
    fn replace(&self, contents: &[Vec<u8>]) -> Result<String, String>;
}

/// Reads every file, naming the one that cannot be read.
pub(crate) fn read_files(paths: &[PathBuf]) -> Result<Vec<Vec<u8>>, String> {
    paths
        .iter()
        .map(|path: &PathBuf| {
            std::fs::read(path).map_err(|error| format!("reading {}: {error}", path.display()))
        })
        .collect()
}

/// One reloadable thing and the contents last tried, loaded or refused: a poll that finds
/// them unchanged does nothing, so a refused file is warned about once, not at every poll.
struct Watched {
    reloadable: Arc<dyn Reloadable>,
    last_tried: Result<Vec<Vec<u8>>, String>,
}

impl Watched {
    /// Reloads if the contents changed since last tried, or whatever they are if `forced`.
    fn check(&mut self, forced: bool) {
        let what = self.reloadable.what();
        let contents = read_files(&self.reloadable.files());
        if !forced && contents == self.last_tried {
            return;
        }
        match &contents {
            Err(error) => warn!(what, %error, "reload refused: keeping the previous one"),
            Ok(bytes) => match self.reloadable.replace(bytes) {
                Ok(loaded) => info!(what, %loaded, "reloaded"),
                Err(error) => warn!(what, %error, "reload refused: keeping the previous one"),
            },
        }
        self.last_tried = contents;
    }
}

/// Reloads on SIGHUP and on a change of contents. Made before tickd says it serves, so
/// that a SIGHUP from then on reloads instead of ending the process (the default action).
pub(crate) struct Reloader {
    watched: Vec<Watched>,
    hangup: Option<Signal>,
    interval: Duration,
}

impl Reloader {
    /// `reloadables` were just loaded from their files: those contents are the first
    /// "last tried". A zero `interval` reloads on SIGHUP only.
    pub(crate) fn new(reloadables: Vec<Arc<dyn Reloadable>>, interval: Duration) -> Self {
        let hangup = signal(SignalKind::hangup())
            .inspect_err(|error| warn!(%error, "cannot handle SIGHUP: reload by file change only"))
            .ok();
        let watched = reloadables
            .into_iter()
            .map(|reloadable| Watched {
                last_tried: read_files(&reloadable.files()),
                reloadable,
            })
            .collect();
        Self {
            watched,
            hangup,
            interval,
        }
    }

    /// Runs until the drain begins.
    pub(crate) async fn run(mut self, stop_signal: watch::Receiver<bool>) {
        let stopped = super::drain::stopped(stop_signal);
        tokio::pin!(stopped);
        let mut poll = (!self.interval.is_zero() && !self.watched.is_empty())
            .then(|| tokio::time::interval(self.interval));
        loop {
            let forced = tokio::select! {
                () = &mut stopped => return,
                Some(()) = hangup(&mut self.hangup) => true,
                _ = tick(&mut poll) => false,
            };
            if forced {
                info!(files = self.watched.len(), "sighup: reloading");
            }
            // Reading a few small files, off the runtime's threads all the same.
            let mut watched = std::mem::take(&mut self.watched);
            watched = tokio::task::spawn_blocking(move || {
                for item in &mut watched {
                    item.check(forced);
                }
                watched
            })
            .await
            .expect("reload task");
            self.watched = watched;
        }
    }
}

async fn hangup(signal: &mut Option<Signal>) -> Option<()> {
    match signal {
        Some(signal) => signal.recv().await,
        None => std::future::pending().await,
    }
}

async fn tick(poll: &mut Option<tokio::time::Interval>) {
    match poll {
        Some(poll) => {
            poll.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// `--auth-token-file`, whose tokens the [`Authenticator`] checks.
pub(crate) struct TokenFile {
    pub(crate) path: PathBuf,
    pub(crate) authenticator: Authenticator,
}

impl Reloadable for TokenFile {
    fn what(&self) -> &'static str {
        "token file"
    }

    fn files(&self) -> Vec<PathBuf> {
        vec![self.path.clone()]
    }

    fn replace(&self, contents: &[Vec<u8>]) -> Result<String, String> {
        let text = contents
            .first()
            .map(|bytes| text_of(&self.path, bytes))
            .transpose()?
            .unwrap_or_default();
        let tokens = Tokens::from_file_text(&self.path, text).map_err(|error| error.to_string())?;
        let count = tokens.len();
        self.authenticator.replace_tokens(tokens);
        Ok(format!("{} tokens from {}", count, self.path.display()))
    }
}

/// The contents of one file as text, naming it if it is not UTF-8.
fn text_of<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a str, String> {
    std::str::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", path.display()))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Loads one file's text, refusing "bad"; counts the attempts.
    struct Counting {
        path: PathBuf,
        attempts: AtomicUsize,
        loaded: std::sync::Mutex<String>,
    }

    impl Reloadable for Counting {
        fn what(&self) -> &'static str {
            "test file"
        }
        fn files(&self) -> Vec<PathBuf> {
            vec![self.path.clone()]
        }
        fn replace(&self, contents: &[Vec<u8>]) -> Result<String, String> {
            self.attempts.fetch_add(1, Ordering::SeqCst);
            let text = String::from_utf8(contents[0].clone()).unwrap();
            if text == "bad" {
                return Err("bad contents".into());
            }
            *self.loaded.lock().unwrap() = text.clone();
            Ok(text)
        }
    }

    #[test]
    fn a_change_is_tried_once_and_a_refused_file_leaves_the_old_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        std::fs::write(&path, "one").unwrap();
        let counting = Arc::new(Counting {
            path: path.clone(),
            attempts: AtomicUsize::new(0),
            loaded: std::sync::Mutex::new("one".into()),
        });
        let mut watched = Watched {
            last_tried: read_files(&counting.files()),
            reloadable: counting.clone(),
        };
        let attempts = || counting.attempts.load(Ordering::SeqCst);
        watched.check(false);
        assert_eq!(attempts(), 0, "unchanged contents are not reloaded");
        std::fs::write(&path, "bad").unwrap();
        watched.check(false);
        watched.check(false);
        assert_eq!(attempts(), 1, "a refused file is tried once per change");
        assert_eq!(*counting.loaded.lock().unwrap(), "one");
        watched.check(true);
        assert_eq!(attempts(), 2, "SIGHUP tries again whatever the contents");
        std::fs::write(&path, "two").unwrap();
        watched.check(false);
        assert_eq!(*counting.loaded.lock().unwrap(), "two");
        std::fs::remove_file(&path).unwrap();
        watched.check(false);
        watched.check(false);
        assert_eq!(attempts(), 3, "a missing file is not handed over");
        assert_eq!(*counting.loaded.lock().unwrap(), "two");
    }
}
