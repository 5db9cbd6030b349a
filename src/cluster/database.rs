//! The store database as a replica reaches it. `--store` (with `--store-ca-file`) is read
//! once into a [`Database`]: the connection settings and the TLS connector that every
//! connection of the replica is opened with (API calls, deliveries, leases, firing, the
//! listener), and a description of it that never holds the password.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use tokio_postgres::config::Host;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;
use tracing::warn;

use super::answers::Answers;
use super::error::ClusterError;
use super::store_url::TlsParams;
use super::tls::{self, SslMode};
use crate::domain::with_causes;

/// A live connection's driver, which the loader polls itself for notifications.
pub(crate) type Connection =
    tokio_postgres::Connection<Socket, <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream>;

/// What every connection's session is given: limits that end a statement running for a
/// minute or a transaction left idle as long, and a fresh plan at every run (see
/// [`Database::new`]).
const SESSION_OPTIONS: &str = "-c statement_timeout=60000 \
     -c idle_in_transaction_session_timeout=60000 -c plan_cache_mode=force_custom_plan";

/// What [`Database::with_generic_plans`]'s connections are given on top: one plan per
/// prepared statement, reaching tables by index whatever the statistics say, and no JIT.
///
/// Why no JIT: with sequential scans off, the planner prices every scan it cannot avoid
/// at 10^10, far above `jit_above_cost`, so any statement these sessions run that can
/// only scan a table is compiled at every run. tickd's own statements reach their tables
/// by index, but an operator's trigger runs in the same session: an audit trigger on
/// `tickd_expirations` that read a one-row table cost 10 ms a row that way (JIT inlining
/// 100 ms a call, measured with `EXPLAIN ANALYZE`), against 35 µs with JIT off, and made
/// firing batches of a few thousand timers run past a minute.
const GENERIC_PLAN_OPTIONS: &str = "-c plan_cache_mode=force_generic_plan \
     -c enable_seqscan=off -c enable_mergejoin=off -c jit=off";

/// And [`Database::with_probe_plans`]' on top of those: no hash joins either, so that a
/// table is reached only by probes from the other side of a join.
const PROBE_PLAN_OPTIONS: &str = "-c enable_hashjoin=off";

/// How long [`Database::with_generic_plans`]'s connections keep a statement (and so its plan)
/// before preparing it again.
pub(super) const GENERIC_PLAN_LIFETIME: Duration = Duration::from_millis(250);

/// Where the store is and how to talk to it: what every connection is opened from.
#[derive(Clone)]
pub struct Database {
    config: tokio_postgres::Config,
    mode: SslMode,
    tls: MakeRustlsConnect,
    /// Set: the server keeps one plan per prepared statement, and a statement is prepared
    /// again once this old ([`Database::with_generic_plans`]).
    generic_plan_lifetime: Option<Duration>,
    /// When the database last answered any connection opened from this database or a
    /// variant of it (shared by the clones).
    answers: Answers,
}

impl Database {
    /// Reads a `postgres://` URL (or libpq's `key=value` form) and the CA file, if any.
    ///
    /// tokio-postgres parses `sslmode` but knows only disable, prefer and require (whether
    /// to ask for TLS, and whether to insist), and has no `sslrootcert`. So both are taken
    /// out of a URL's query here, before the rest is handed to it: tokio-postgres is told
    /// the negotiation the mode implies (`require` for the verify modes) and rustls does the
    /// checking (see [`super::tls`]). In the `key=value` form only tokio-postgres' three
    /// modes are read, and the CA comes from `ca_file`.
    ///
    /// `prefer` falls back to plaintext when the server declines TLS, not after a failed
    /// handshake: a certificate that fails the given CA is refused in every mode.
    ///
    /// Every connection gets TCP keepalives that find a dead peer within a minute, and
    /// server-side limits that end a statement running for a minute or a transaction left
    /// idle as long, so that no lock one holds (a partition row, say) outlives a frozen
    /// replica.
    ///
    /// Statements are prepared once per connection (see [`StoreClient`]) but planned at
    /// every run (`plan_cache_mode=force_custom_plan`): a generic plan fixed while
    /// `tickd_expirations` is nearly empty (a sequential scan is cheapest then) would
    /// stay in use as it grows, and the planner sizes each batch's arrays only from the
    /// values.
    pub fn new(url: &str, ca_file: Option<&Path>) -> Result<Self, ClusterError> {
        let invalid = |reason: String| ClusterError::InvalidConfig(format!("--store: {reason}"));
        let params = TlsParams::take_from(url).map_err(invalid)?;
        let mut config: tokio_postgres::Config = params
            .rest
            .parse()
            .map_err(|error| invalid(with_causes(&error)))?;
        let mode = match &params.sslmode {
            Some(mode) => SslMode::parse(mode).map_err(invalid)?,
            None => SslMode::from_negotiation(config.get_ssl_mode()),
        };
        let ca_file = match (ca_file, &params.sslrootcert) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "the CA is given twice, by --store-ca-file and by sslrootcert=: keep one"
                        .to_owned(),
                ))
            }
            (Some(path), None) => Some(path),
            (None, Some(path)) => Some(Path::new(path.as_str())),
            (None, None) => None,
        };
        let tls = tls::connector(mode, ca_file).map_err(ClusterError::InvalidConfig)?;
        config
            .ssl_mode(mode.negotiation())
            .connect_timeout(Duration::from_secs(5))
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30))
            .options(SESSION_OPTIONS);
        Ok(Self {
            config,
            mode,
            tls,
            generic_plan_lifetime: None,
            answers: Answers::default(),
        })
    }

    /// The same database, for the connection that runs the firing statement: the server
    /// plans each prepared statement once, and the statement is prepared again every
    /// [`GENERIC_PLAN_LIFETIME`].
    ///
    /// Why: planning the firing statement (nine CTEs, four joins on `tickd_timers`) takes
    /// more of the database than running a batch through it: 1.13 ms of planning against
    /// 0.97 ms of execution a call, and half a core of the database for planning alone,
    /// with three replicas at 5,000 timers/s (`pg_stat_statements` with `track_planning`;
    /// a replica fires every few milliseconds, ten timers at a time). A generic plan is
    /// sized from the tables as they are when it is made, though: one made while
    /// `tickd_timers` was nearly empty scans all of it for every batch (measured: a full
    /// index scan as the outer side), and growth alone does not make the server plan
    /// again. Hence the two guards: with sequential scans and merge joins off, the tables
    /// are reached by index probes once they hold anything, and no plan outlives a
    /// quarter of a second, so the one made on a nearly empty table is gone before the
    /// table is large.
    ///
    /// Hash joins stay on: the statement joins its own steps (what it deleted with what
    /// it recorded), and as nested loops those cost the square of a batch, which made
    /// large batches slower than planning them afresh (3.48 ms against 2.52 + 1.07 ms for
    /// sixty timers, with hash joins off). `EXPLAIN EXECUTE` of the plan kept, on an empty
    /// table and on one of 500,000 timers: probes of `tickd_timers` by index, hash joins
    /// between the statement's steps.
    pub fn with_generic_plans(&self) -> Self {
        self.keeping_plans("")
    }

    /// [`Database::with_generic_plans`] with hash joins off as well, for the ack
    /// connection: the ack statement's only join is of the deliveries asked with their
    /// rows, and a kept plan must reach the rows by a probe per delivery. With hash joins
    /// on, the plan made on an empty `tickd_expirations` hashed all of it for every batch
    /// (`EXPLAIN EXECUTE`; see `delivery::acks` for the rest). Claims keep a fresh plan
    /// per run.
    pub fn with_probe_plans(&self) -> Self {
        self.keeping_plans(PROBE_PLAN_OPTIONS)
    }

    /// The same database, keeping one generic plan per prepared statement for
    /// [`GENERIC_PLAN_LIFETIME`], with `extra_options` on top of the generic ones.
    fn keeping_plans(&self, extra_options: &str) -> Self {
        let mut keeping = self.clone();
        keeping.config.options(format!(
            "{SESSION_OPTIONS} {GENERIC_PLAN_OPTIONS} {extra_options}"
        ));
        keeping.generic_plan_lifetime = Some(GENERIC_PLAN_LIFETIME);
        keeping
    }

    /// The same database, its statements cancelled by the server once they have run for
    /// `limit` (`statement_timeout`, after whatever the other options set). For the firing
    /// connections: a firing statement must end within a bound its fence relies on (see
    /// `firing::statement_bound`).
    pub fn with_statement_timeout(&self, limit: Duration) -> Self {
        let mut limited = self.clone();
        let options = self.config.get_options().unwrap_or_default();
        limited.config.options(format!(
            "{options} -c statement_timeout={}",
            limit.as_millis().max(1)
        ));
        limited
    }

    pub(crate) fn ssl_mode(&self) -> SslMode {
        self.mode
    }

    /// How long connections opened from this database keep a prepared statement (none:
    /// for as long as they live).
    pub(super) fn plan_lifetime(&self) -> Option<Duration> {
        self.generic_plan_lifetime
    }

    /// When the database last answered a statement of the connections opened from this
    /// database and its variants.
    pub(crate) fn answers(&self) -> &Answers {
        &self.answers
    }

    /// Opens one connection and drives it on its own task.
    pub async fn connect(&self) -> Result<Client, ClusterError> {
        let (client, connection) = self.open().await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                warn!(error = %with_causes(&error), "store connection closed");
            }
        });
        Ok(client)
    }

    /// Opens one connection, leaving its driver to the caller.
    pub(crate) async fn open(&self) -> Result<(Client, Connection), ClusterError> {
        self.config
            .connect(self.tls.clone())
            .await
            .map_err(|source| ClusterError::Connect {
                database: self.to_string(),
                source,
            })
    }

    /// Whether `client`'s connection is encrypted, as the server sees it; `None` where the
    /// server cannot say (a PostgreSQL-compatible database without `pg_stat_ssl`).
    pub async fn encrypted(client: &Client) -> Option<bool> {
        let row = client
            .query_one(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .await
            .ok()?;
        row.try_get(0).ok()
    }
}

/// `user@host:port/database (sslmode=...)`: enough to tell which database and how, and
/// never the password.
impl fmt::Display for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .map(|host| match host {
                Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        let ports: Vec<String> = self.config.get_ports().iter().map(u16::to_string).collect();
        write!(
            f,
            "{}@{}:{}/{} (sslmode={})",
            self.config.get_user().unwrap_or_default(),
            hosts.join(","),
            ports.join(","),
            self.config.get_dbname().unwrap_or_default(),
            self.mode
        )
    }
}

impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Database({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_generic_plan_database_plans_once_and_prepares_again() {
        let database = Database::new("postgres://tickd@db/tickd", None).expect("a valid URL");
        assert_eq!(database.generic_plan_lifetime, None);
        assert!(!database
            .config
            .get_options()
            .unwrap_or_default()
            .contains("force_generic_plan"));
        let firing = database.with_generic_plans();
        assert_eq!(firing.generic_plan_lifetime, Some(GENERIC_PLAN_LIFETIME));
        let options = firing.config.get_options().unwrap_or_default();
        // The generic settings come after the defaults, so they are the ones that hold.
        assert!(
            options.find("force_custom_plan") < options.find("force_generic_plan"),
            "{options}"
        );
        assert!(options.contains("enable_seqscan=off"), "{options}");
        assert!(options.contains("jit=off"), "{options}");
        assert!(!options.contains("enable_hashjoin=off"), "{options}");
        let probes = database.with_probe_plans();
        assert_eq!(probes.generic_plan_lifetime, Some(GENERIC_PLAN_LIFETIME));
        let options = probes.config.get_options().unwrap_or_default();
        assert!(options.contains("force_generic_plan"), "{options}");
        assert!(options.contains("enable_hashjoin=off"), "{options}");
        assert!(options.contains("statement_timeout=60000"), "{options}");
        let firing = firing.with_statement_timeout(Duration::from_millis(500));
        let options = firing.config.get_options().unwrap_or_default();
        // The later setting is the one that holds.
        assert!(
            options.find("statement_timeout=60000") < options.find("statement_timeout=500"),
            "{options}"
        );
        assert!(options.contains("force_generic_plan"), "{options}");
    }

    #[test]
    fn the_mode_comes_from_the_url_or_defaults_to_prefer() {
        let mode = |url: &str| Database::new(url, None).expect("valid").ssl_mode();
        assert_eq!(mode("postgres://db/tickd"), SslMode::Prefer);
        assert_eq!(
            mode("postgres://db/tickd?sslmode=disable"),
            SslMode::Disable
        );
        assert_eq!(mode("host=db sslmode=require"), SslMode::Require);
        let error =
            Database::new("postgres://db/tickd?sslmode=verify-full", None).expect_err("no CA");
        assert!(error.to_string().contains("--store-ca-file"), "{error}");
        let error = Database::new(
            "postgres://db/t?sslrootcert=/a.pem",
            Some(Path::new("/b.pem")),
        )
        .expect_err("two CAs");
        assert!(error.to_string().contains("given twice"), "{error}");
    }

    #[test]
    fn no_description_shows_the_password() {
        let url = "postgres://tickd:secretpw@db:6432/timers?sslmode=require&password=secretpw";
        let database = Database::new(url, None).expect("valid");
        assert_eq!(
            database.to_string(),
            "tickd@db:6432/timers (sslmode=require)"
        );
        assert!(!format!("{database:?}").contains("secretpw"));
        let unreadable =
            Database::new("postgres://tickd:secretpw@db:x/timers", None).expect_err("a bad port");
        assert!(!unreadable.to_string().contains("secretpw"), "{unreadable}");
    }
}
