//! `--max-namespaces` in replicated mode: the live namespaces are rows of
//! `tickd_namespaces`, shared by every replica, and a registration that would add one
//! beyond the limit is refused with RESOURCE_EXHAUSTED, as on one node.
//!
//! A namespace is live here while it holds pending timers or unacknowledged expirations
//! (waiting, in flight or dead). Subscribers and observers hold none in the database and
//! do not count (their streams are bounded by the stream limits). What this means in rows:
//! - **admitted:** a registration into a namespace with no row takes, in one transaction,
//!   the cluster's row lock (so admissions on every replica happen one at a time), counts
//!   the rows and inserts the new one only if the count is under the limit. The count is
//!   exact: what other replicas admitted is committed before the lock is released.
//! - **kept:** a registration into a namespace with a row refreshes its `seen_at` when it
//!   is older than [`REFRESH`], in the statement that finds it; the trim deletes only rows
//!   older than [`GRACE`] whose namespace holds nothing, so the row outlives the
//!   registration's insert (unless that takes longer than `GRACE - REFRESH`).
//! - **forgotten:** every replica's trim deletes the rows of namespaces that hold nothing
//!   and were not seen for [`GRACE`]; only then does a namespace stop counting.
//!
//! A replica remembers for [`REMEMBERED`] which namespaces it found kept, so a steady
//! stream of registrations into the same namespaces costs no extra statement.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap, FxHashSet};
use tokio_postgres::Client;

use super::connections::Connections;
use super::error::ClusterError;
use crate::domain::TimerError;

/// A namespace's row is refreshed by a registration into it once it is this old.
const REFRESH: Duration = Duration::from_secs(10);

/// A namespace that holds nothing is forgotten once its row is this old.
pub(crate) const GRACE: Duration = Duration::from_secs(30);

/// How long a replica trusts that a namespace it found kept still is: its row is safe
/// from the trim for `GRACE - REFRESH` after that, which leaves a registration that
/// started within this as long again to land.
const REMEMBERED: Duration = Duration::from_secs(10);

/// Namespaces remembered at most; beyond it the stale ones are let go (and, if none is,
/// all of them: they are only a shortcut).
const REMEMBERED_MAX: usize = 4_096;

/// The namespaces of `$1` whose rows the trim will leave alone for `GRACE - REFRESH` at
/// least: refreshed now if older than `$2` milliseconds, else fresh already. Both halves
/// compare with the statement's one `now()`, so no row falls between them; one refreshed
/// by another call meanwhile is in neither, and goes the admission's way, which finds it.
const KEPT: &str = "
WITH refreshed AS (
    UPDATE tickd_namespaces SET seen_at = clock_timestamp()
    WHERE namespace = ANY($1) AND seen_at < now() - $2::INT8 * INTERVAL '1 millisecond'
    RETURNING namespace
)
SELECT namespace FROM refreshed
UNION
SELECT namespace FROM tickd_namespaces
WHERE namespace = ANY($1) AND seen_at >= now() - $2::INT8 * INTERVAL '1 millisecond'";

/// How long an admission waits for another replica's to end before giving up (the call
/// answers UNAVAILABLE), and how long an admission left idle keeps its session: a replica
/// paused or cut off while it holds the lock cannot hold every other one's admissions.
const ADMISSION_SETTINGS: &str = "SET LOCAL lock_timeout = '5s'; \
     SET LOCAL idle_in_transaction_session_timeout = '10s'";

/// Deletes the rows of namespaces holding no timer and no unacknowledged expiration (live
/// or dead: each through its own index), not seen for `$1` milliseconds.
const FORGET: &str = "
DELETE FROM tickd_namespaces n
WHERE n.seen_at < clock_timestamp() - $1::INT8 * INTERVAL '1 millisecond'
  AND NOT EXISTS (SELECT 1 FROM tickd_timers t WHERE t.namespace = n.namespace)
  AND NOT EXISTS (SELECT 1 FROM tickd_expirations e
                  WHERE e.namespace = n.namespace AND e.acked_at IS NULL AND NOT e.dead)
  AND NOT EXISTS (SELECT 1 FROM tickd_expirations e
                  WHERE e.namespace = n.namespace AND e.dead)";

/// The admission transaction's connection.
struct Admissions {
    connections: Connections,
    /// Set from BEGIN until COMMIT or ROLLBACK: still set when the next admission starts,
    /// the last one was cut short (its task gone) and left its transaction open, holding
    /// the lock, which the next one ends first.
    open: bool,
}

/// A replica's side of the namespace limit.
#[derive(Clone)]
pub(crate) struct NamespaceCap {
    /// `--max-namespaces` (0: no limit; rows are kept all the same, so that a replica
    /// started with a limit later counts them).
    max: usize,
    /// Its own connection, for the admission transaction: the shared ones pipeline
    /// other calls' statements, which must not run inside it.
    admissions: Arc<tokio::sync::Mutex<Admissions>>,
    remembered: Arc<Mutex<FxHashMap<Arc<str>, Instant>>>,
}

impl NamespaceCap {
    pub(crate) fn new(max: usize, admissions: Connections) -> Self {
        Self {
            max,
            admissions: Arc::new(tokio::sync::Mutex::new(Admissions {
                connections: admissions,
                open: false,
            })),
            remembered: Arc::default(),
        }
    }

    /// Makes sure each of `namespaces` is live (admitting the new ones, in their order,
    /// while the limit allows); returns the refusal of each one that may not be (the
    /// caller counts them, one per refused item).
    pub(crate) async fn admit(
        &self,
        connections: &Connections,
        namespaces: &[&str],
    ) -> Result<FxHashMap<String, TimerError>, ClusterError> {
        let unknown = self.not_remembered(namespaces);
        if unknown.is_empty() {
            return Ok(FxHashMap::default());
        }
        let kept: FxHashSet<String> = connections
            .client()
            .await?
            .query(KEPT, &[&unknown, &(REFRESH.as_millis() as i64)])
            .await
            .map_err(ClusterError::query("looking up namespaces"))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let new: Vec<&str> = unknown
            .iter()
            .copied()
            .filter(|namespace| !kept.contains(*namespace))
            .collect();
        let (admitted, refused) = if new.is_empty() {
            (Vec::new(), FxHashMap::default())
        } else {
            self.admit_new(&new).await?
        };
        self.remember(kept.iter().map(String::as_str).chain(admitted));
        Ok(refused)
    }

    /// Those of `namespaces` this replica did not find kept within [`REMEMBERED`],
    /// without repeats, in their order.
    fn not_remembered<'a>(&self, namespaces: &[&'a str]) -> Vec<&'a str> {
        let remembered = self.lock();
        let mut seen = FxHashSet::default();
        namespaces
            .iter()
            .copied()
            .filter(|namespace| seen.insert(*namespace))
            .filter(|namespace| {
                remembered
                    .get(*namespace)
                    .is_none_or(|since| since.elapsed() >= REMEMBERED)
            })
            .collect()
    }

    fn remember<'a>(&self, namespaces: impl Iterator<Item = &'a str>) {
        let now = Instant::now();
        let mut remembered = self.lock();
        for namespace in namespaces {
            if remembered.len() >= REMEMBERED_MAX {
                remembered.retain(|_, since| since.elapsed() < REMEMBERED);
                if remembered.len() >= REMEMBERED_MAX {
                    remembered.clear();
                }
            }
            remembered.insert(Arc::from(namespace), now);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<Arc<str>, Instant>> {
        self.remembered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Admits `new` namespaces (none had a row when looked up) in one transaction under
    /// the cluster's row lock, in their order while there is room; the rest are refused.
    async fn admit_new<'a>(
        &self,
        new: &[&'a str],
    ) -> Result<(Vec<&'a str>, FxHashMap<String, TimerError>), ClusterError> {
        let mut admissions = self.admissions.lock().await;
        let client = admissions.connections.client().await?;
        if admissions.open {
            client
                .batch_execute("ROLLBACK")
                .await
                .map_err(ClusterError::query("ending an admission cut short"))?;
        }
        admissions.open = true;
        client
            .batch_execute(&format!("BEGIN; {ADMISSION_SETTINGS}"))
            .await
            .map_err(ClusterError::query("starting a namespace admission"))?;
        let admitted = self.admit_in_transaction(&client, new).await;
        let ended = match admitted {
            Ok(_) => client.batch_execute("COMMIT").await,
            Err(_) => client.batch_execute("ROLLBACK").await,
        };
        // A failed COMMIT or ROLLBACK ends the transaction too (or the connection is gone,
        // and a new one is opened on its next use).
        admissions.open = false;
        let admitted = admitted?;
        ended.map_err(ClusterError::query("committing a namespace admission"))?;
        Ok(admitted)
    }

    async fn admit_in_transaction<'a>(
        &self,
        client: &Client,
        new: &[&'a str],
    ) -> Result<(Vec<&'a str>, FxHashMap<String, TimerError>), ClusterError> {
        if self.max > 0 {
            client
                .execute("SELECT 1 FROM tickd_cluster FOR UPDATE", &[])
                .await
                .map_err(ClusterError::query("locking namespace admissions"))?;
        }
        // Those another call admitted (or refreshed) since the lookup are live already.
        let existing: FxHashSet<String> = client
            .query(
                "UPDATE tickd_namespaces SET seen_at = clock_timestamp()
                 WHERE namespace = ANY($1) RETURNING namespace",
                &[&new],
            )
            .await
            .map_err(ClusterError::query("refreshing namespaces"))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let (existing, new): (Vec<&'a str>, Vec<&'a str>) = new
            .iter()
            .partition(|namespace| existing.contains(**namespace));
        let mut room = usize::MAX;
        let mut live = 0;
        if self.max > 0 {
            live = client
                .query_one("SELECT count(*) FROM tickd_namespaces", &[])
                .await
                .map_err(ClusterError::query("counting namespaces"))?
                .get::<_, i64>(0) as usize;
            room = self.max.saturating_sub(live);
        }
        let (admitted, refused) = new.split_at(new.len().min(room));
        client
            .execute(
                "INSERT INTO tickd_namespaces (namespace) SELECT unnest($1::TEXT[])
                 ON CONFLICT (namespace) DO UPDATE SET seen_at = clock_timestamp()",
                &[&admitted],
            )
            .await
            .map_err(ClusterError::query("admitting namespaces"))?;
        let refused = refused
            .iter()
            .map(|namespace| {
                let error = TimerError::ResourceExhausted(format!(
                    "namespace {namespace:?} would be a new one, and {} namespaces are live \
                     already (--max-namespaces {})",
                    live + admitted.len(),
                    self.max
                ));
                (namespace.to_string(), error)
            })
            .collect();
        Ok(([existing.as_slice(), admitted].concat(), refused))
    }
}

/// Deletes the rows of namespaces that hold nothing and were not seen for [`GRACE`]
/// (every replica's trim runs it; the delete is idempotent); returns how many are live.
pub(crate) async fn forget_empty(connections: &Connections) -> Result<u64, ClusterError> {
    let client = connections.client().await?;
    client
        .execute(FORGET, &[&(GRACE.as_millis() as i64)])
        .await
        .map_err(ClusterError::query("forgetting empty namespaces"))?;
    let live = client
        .query_one("SELECT count(*) FROM tickd_namespaces", &[])
        .await
        .map_err(ClusterError::query("counting namespaces"))?;
    Ok(live.get::<_, i64>(0) as u64)
}
