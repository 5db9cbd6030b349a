//! The daemon's configuration: every flag also reads a `TICKD_*` environment variable, and
//! every default is embedded, so `tickd` with no arguments is a working server.

mod sync_mode;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use crate::api::streams::StreamLimitsConfig;
use crate::budget::container::{MemoryLimit, Probe};
use crate::budget::memory::BudgetSource;
use crate::budget::{ByteCount, MemoryBudget};
use crate::cluster::{ClusterConfig, ClusterError, Database, StoreUrl};
use crate::domain::DeliveryConfig;
use crate::domain::SubscriberDefaults;
use crate::metrics::Metrics;
use crate::sink::{SecretFileFlag, SinkConfig, SinkRateFlag, SinkSpecs};
use crate::worker::WorkerConfig;
pub use sync_mode::SyncMode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `--ack-timeout`'s default as the flag shows it, from the one place defaults are written
/// ([`DeliveryConfig::DEFAULT`]).
static ACK_TIMEOUT_DEFAULT: LazyLock<String> = LazyLock::new(|| {
    humantime::format_duration(DeliveryConfig::DEFAULT.subscriber.ack_timeout).to_string()
});

/// Durations are written like `1500ms`, `30s` or `2h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|error| format!("invalid duration {text:?}: {error}"))
}

/// A connection timeout: more than zero (zero would close every connection at once) and
/// at most 30 days (the clock arithmetic stays far from overflow).
fn parse_connection_timeout(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration.is_zero() || duration > Duration::from_secs(30 * 24 * 3600) {
        return Err(format!(
            "{text:?}: give a duration above 0 and at most 30 days"
        ));
    }
    Ok(duration)
}

fn parse_positive(text: &str) -> Result<usize, String> {
    text.parse::<usize>()
        .ok()
        .filter(|value| *value > 0)
        .ok_or_else(|| format!("invalid value {text:?}: give a whole number of at least 1"))
}

/// The most pushes in flight one sink may have: far beyond what a sink takes, and within
/// what a semaphore and the subscription's window (twice it) can hold.
const MOST_SINK_IN_FLIGHT: usize = 100_000;

fn parse_sink_max_in_flight(text: &str) -> Result<usize, String> {
    parse_positive(text).and_then(|value| {
        if value <= MOST_SINK_IN_FLIGHT {
            Ok(value)
        } else {
            Err(format!(
                "invalid value {text:?}: at most {MOST_SINK_IN_FLIGHT} pushes in flight"
            ))
        }
    })
}

fn parse_mode(text: &str) -> Result<u32, String> {
    u32::from_str_radix(text, 8)
        .ok()
        .filter(|mode| *mode <= 0o777)
        .ok_or_else(|| format!("invalid file mode {text:?}: give octal digits like 660"))
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "tickd",
    version,
    about = "A timer service: a hashed timing wheel behind gRPC"
)]
pub struct Config {
    /// gRPC listen address.
    #[arg(long, env = "TICKD_LISTEN", default_value = "0.0.0.0:50051")]
    pub listen: SocketAddr,
    /// Also serve gRPC on this Unix socket (for sidecars sharing a volume).
    #[arg(long, env = "TICKD_UNIX_SOCKET")]
    pub unix_socket: Option<PathBuf>,
    /// Where the durable log and snapshots live.
    #[arg(long, env = "TICKD_DATA_DIR", default_value = "./tickd-data")]
    pub data_dir: PathBuf,
    /// When a mutation counts as durable: `always` fsyncs before answering (group commit),
    /// `interval` fsyncs every 10 ms, `none` keeps timers in memory only (no data dir).
    #[arg(long, env = "TICKD_SYNC", value_enum, default_value_t = SyncMode::Always)]
    pub sync: SyncMode,
    /// Log bytes written since the last snapshot that trigger the next one (or the last
    /// snapshot's size, if larger, so that a big live set is not rewritten over and over).
    #[arg(long, env = "TICKD_SNAPSHOT_AFTER_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub snapshot_after_bytes: usize,
    /// Start even when the log is damaged (anywhere but a torn final append, which is always
    /// dropped): keep every record before the first damage and move the rest aside, next to
    /// the file (`<file>.damaged-at-<offset>`, later files renamed `<file>.after-damage`),
    /// logging what moved where. Without it tickd refuses to start and changes nothing.
    /// Applied by the `tickd` binary before the server starts.
    #[arg(long, env = "TICKD_RECOVER_TRUNCATE", value_parser = clap::builder::BoolishValueParser::new())]
    pub recover_truncate: bool,
    /// `tickd check DIR` reads a data directory without serving.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Length of one wheel tick: the lateness bound is one tick plus scheduling noise.
    #[arg(long, env = "TICKD_TICK", default_value = "1ms", value_parser = parse_duration)]
    pub tick: Duration,
    /// Bytes tickd may hold for timers, keys, payloads, buffered and dead expirations, their
    /// indexes and requests in flight (`256MiB`, `2GiB`, ...); a registration that would
    /// cross it fails with RESOURCE_EXHAUSTED while cancels, acks and reads are still
    /// served. Default: half the container's memory limit (cgroup), else half of physical
    /// memory. `0`: no memory budget.
    #[arg(long, env = "TICKD_MAX_MEMORY")]
    pub max_memory: Option<ByteCount>,
    /// Bytes the data directory (log segments and snapshots) may reach (`64MiB`, `10GiB`,
    /// ...); beyond it registrations fail with RESOURCE_EXHAUSTED while cancels and acks
    /// still go through. `0`: no disk budget (a full disk still stops tickd safely).
    #[arg(long, env = "TICKD_MAX_DISK", default_value = "0")]
    pub max_disk: ByteCount,
    /// Where the cgroup file system is mounted, read for the default --max-memory (a test
    /// points it at a fake layout).
    #[arg(
        long,
        env = "TICKD_CGROUP_ROOT",
        default_value = "/sys/fs/cgroup",
        hide = true
    )]
    pub cgroup_root: PathBuf,
    /// Pending timers the server holds at most; beyond it registrations fail with RESOURCE_EXHAUSTED.
    #[arg(long, env = "TICKD_MAX_PENDING", default_value_t = 10_000_000)]
    pub max_pending: usize,
    /// Largest payload accepted, in bytes.
    #[arg(long, env = "TICKD_MAX_PAYLOAD_BYTES", default_value_t = 64 * 1024)]
    pub max_payload_bytes: usize,
    /// Items accepted in one NewTimeouts batch.
    #[arg(long, env = "TICKD_MAX_BATCH", default_value_t = 10_000)]
    pub max_batch: usize,
    /// Commands that may queue for the wheel worker from one server thread; beyond it calls fail with RESOURCE_EXHAUSTED.
    #[arg(long, env = "TICKD_WORKER_QUEUE", default_value_t = 16_384)]
    pub worker_queue: usize,
    /// Expirations buffered per namespace while no subscriber can take them.
    #[arg(long, env = "TICKD_MAX_BUFFERED", default_value_t = DeliveryConfig::DEFAULT.buffer_capacity)]
    pub max_buffered: usize,
    /// Dead expirations kept (and listed) per namespace.
    #[arg(long, env = "TICKD_MAX_DEAD", default_value_t = DeliveryConfig::DEFAULT.dead_capacity)]
    pub max_dead: usize,
    /// Expirations fired and not yet acknowledged (waiting for a subscriber or in flight),
    /// all namespaces together; beyond it newly fired expirations go to the dead list.
    #[arg(long, env = "TICKD_MAX_BUFFERED_TOTAL", default_value_t = DeliveryConfig::DEFAULT.buffered_total)]
    pub max_buffered_total: usize,
    /// Dead expirations kept, all namespaces together; beyond it the oldest are dropped.
    #[arg(long, env = "TICKD_MAX_DEAD_TOTAL", default_value_t = DeliveryConfig::DEFAULT.dead_total)]
    pub max_dead_total: usize,
    /// Namespaces holding pending timers, expirations or subscribers at once; a
    /// registration that would add one more fails with RESOURCE_EXHAUSTED (0: no limit).
    #[arg(long, env = "TICKD_MAX_NAMESPACES", default_value_t = 100_000)]
    pub max_namespaces: usize,
    /// Default time a subscriber has to acknowledge a delivery.
    #[arg(long, env = "TICKD_ACK_TIMEOUT", default_value = ACK_TIMEOUT_DEFAULT.as_str(), value_parser = parse_duration)]
    pub ack_timeout: Duration,
    /// Deliveries of one expiration before it is kept as dead.
    #[arg(long, env = "TICKD_MAX_ATTEMPTS", default_value_t = DeliveryConfig::DEFAULT.max_attempts)]
    pub max_attempts: u32,
    /// Default number of unacknowledged deliveries a subscriber holds.
    #[arg(long, env = "TICKD_MAX_UNACKED", default_value_t = DeliveryConfig::DEFAULT.subscriber.max_unacked)]
    pub max_unacked: usize,
    /// A namespace's push sink, `NAMESPACE=URL` (repeatable; several separated by commas,
    /// a comma starting another only before `NAMESPACE=SCHEME://`): each of its
    /// expirations is POSTed to an `http://` or `https://` URL (acknowledged by a 2xx),
    /// given to `tickd.v1.Sink/Deliver` at `grpc://` or `grpcs://` HOST:PORT (by OK),
    /// published to a JetStream subject, `nats://HOST:PORT/SUBJECT` (by its PubAck), or
    /// added to a Redis stream, `redis://HOST:PORT/STREAM` (by XADD's answer); the body is
    /// the expiration in proto3 JSON, or encoded with `#protobuf` at the URL's end (`#h2c` too, as
    /// in `#protobuf,h2c`: HTTP/2 without TLS). With a
    /// Subscribe stream's attempts, dead list and Redrive.
    #[arg(long = "sink", env = "TICKD_SINK")]
    pub sinks: Vec<SinkSpecs>,
    /// Where sinks may connect: IP addresses, CIDRs and host names (repeatable; several
    /// separated by commas), checked on the resolved address of every connection. None:
    /// loopback only (a sidecar's app).
    #[arg(long, env = "TICKD_SINK_ALLOW", value_delimiter = ',')]
    pub sink_allow: Vec<String>,
    /// How long a push waits for its sink's answer before it counts as a failed attempt.
    #[arg(long, env = "TICKD_SINK_TIMEOUT", default_value = "10s", value_parser = parse_connection_timeout)]
    pub sink_timeout: Duration,
    /// Pushes to one sink awaiting an answer at most (held ones, while the sink is
    /// unreachable, included). As many again may wait for their acknowledgement or for
    /// room; the rest wait in the namespace's buffer. At most 100,000.
    #[arg(long, env = "TICKD_SINK_MAX_IN_FLIGHT", default_value_t = 64, value_parser = parse_sink_max_in_flight)]
    pub sink_max_in_flight: usize,
    /// PEM CA bundle that https:// and grpcs:// sinks' certificates may chain to, beside
    /// the system's trusted roots.
    #[arg(long, env = "TICKD_SINK_CA")]
    pub sink_ca: Option<PathBuf>,
    /// PEM certificate chain tickd presents to https:// and grpcs:// sinks (mutual TLS).
    #[arg(long, env = "TICKD_SINK_CLIENT_CERT", requires = "sink_client_key")]
    pub sink_client_cert: Option<PathBuf>,
    /// PEM private key for --sink-client-cert.
    #[arg(long, env = "TICKD_SINK_CLIENT_KEY", requires = "sink_client_cert")]
    pub sink_client_key: Option<PathBuf>,
    /// A file holding a token sent to every sink as `Authorization: Bearer <token>` (a
    /// URL's own `user:password@` takes precedence); read at start-up, and again within a
    /// second of the file changing.
    #[arg(long, env = "TICKD_SINK_TOKEN_FILE")]
    pub sink_token_file: Option<PathBuf>,
    /// The namespace's pushes are signed by the Standard Webhooks spec with the secrets of
    /// the file (`whsec_<base64>`, one per line; two sign with both, for a
    /// rotation without a gap); read at start-up, and again within a second of the file
    /// changing. Repeat the flag for more namespaces.
    #[arg(long, value_name = "NAMESPACE=PATH")]
    pub sink_secret_file: Vec<SecretFileFlag>,
    /// The rate the namespace's `--sink` is pushed at, at most: `50/s`, or `50/s,burst=10`
    /// (a token bucket; the default burst is a tenth of a second's pushes). A sink set
    /// through the API takes its rate in SetSink. Repeat the flag for more namespaces.
    #[arg(long, value_name = "NAMESPACE=RATE")]
    pub sink_rate: Vec<SinkRateFlag>,
    /// gRPC calls in progress at once; beyond it calls fail at once with RESOURCE_EXHAUSTED.
    #[arg(long, env = "TICKD_MAX_CONCURRENT_CALLS", default_value_t = 4_096)]
    pub max_concurrent_calls: usize,
    /// Open gRPC connections at most, all listeners together (TCP, TLS and the Unix
    /// socket); a connection beyond it is closed at once.
    #[arg(long, env = "TICKD_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,
    /// Connections still waiting for their HTTP/2 preface kept at most, per listener; a new
    /// one beyond it closes the oldest waiting, so idle sockets cannot keep clients out.
    #[arg(long, env = "TICKD_MAX_HANDSHAKING", default_value_t = 1_024, value_parser = parse_positive)]
    pub max_handshaking: usize,
    /// A connection that has not sent its HTTP/2 preface (or TLS hello) within this is closed.
    #[arg(long, env = "TICKD_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_connection_timeout)]
    pub handshake_timeout: Duration,
    /// A connection with no call open for this long is closed (a client reconnects when it
    /// needs to).
    #[arg(long, env = "TICKD_IDLE_TIMEOUT", default_value = "10m", value_parser = parse_connection_timeout)]
    pub idle_timeout: Duration,
    /// HTTP/2 PING sent on a connection silent for this long; unanswered within
    /// --http2-keepalive-timeout, the connection is closed (a dead peer frees its streams).
    #[arg(long, env = "TICKD_HTTP2_KEEPALIVE_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub http2_keepalive_interval: Duration,
    #[arg(long, env = "TICKD_HTTP2_KEEPALIVE_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub http2_keepalive_timeout: Duration,
    /// Concurrent HTTP/2 streams (calls) one connection may open (SETTINGS_MAX_CONCURRENT_STREAMS).
    #[arg(
        long,
        env = "TICKD_MAX_STREAMS_PER_CONNECTION",
        default_value_t = 1_024
    )]
    pub max_streams_per_connection: u32,
    /// Largest request message accepted, in bytes; refused from its header with
    /// RESOURCE_EXHAUSTED before it is read.
    #[arg(long, env = "TICKD_MAX_REQUEST_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_request_bytes: usize,
    /// Subscribe streams open at most, observers included; beyond it Subscribe is refused.
    #[arg(long, env = "TICKD_MAX_SUBSCRIBE_STREAMS", default_value_t = 10_000)]
    pub max_subscribe_streams: usize,
    /// Subscribe streams one connection may hold open.
    #[arg(
        long,
        env = "TICKD_MAX_SUBSCRIBE_STREAMS_PER_CONNECTION",
        default_value_t = 100
    )]
    pub max_subscribe_streams_per_connection: usize,
    /// KeepAlive streams open at most; beyond it KeepAlive is refused.
    #[arg(long, env = "TICKD_MAX_KEEPALIVE_STREAMS", default_value_t = 4_096)]
    pub max_keepalive_streams: usize,
    /// KeepAlive streams one connection may hold open.
    #[arg(
        long,
        env = "TICKD_MAX_KEEPALIVE_STREAMS_PER_CONNECTION",
        default_value_t = 100
    )]
    pub max_keepalive_streams_per_connection: usize,
    /// grpc.health.v1 Watch and reflection streams open at most (they last as long as the
    /// client likes); beyond it they are refused.
    #[arg(long, env = "TICKD_MAX_WATCH_STREAMS", default_value_t = 1_024)]
    pub max_watch_streams: usize,
    /// Observer Subscribe streams open at most: each costs a copy of every expiration of its
    /// namespace.
    #[arg(long, env = "TICKD_MAX_OBSERVERS", default_value_t = 64)]
    pub max_observers: usize,
    /// PEM certificate chain: serve gRPC over TLS on --listen (the Unix socket stays plain).
    #[arg(long, env = "TICKD_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, env = "TICKD_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle: require client certificates signed by it (mutual TLS).
    #[arg(long, env = "TICKD_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Bearer tokens and the namespaces each may use (`<token> <ns>[,<ns>...]` or `<token> *`
    /// per line); without it, calls need no token.
    #[arg(long, env = "TICKD_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<PathBuf>,
    /// How often the TLS files and the token file are read again to notice a change, which
    /// is then loaded (SIGHUP reloads at once); `0s` reloads on SIGHUP only.
    #[arg(long, env = "TICKD_RELOAD_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    pub reload_interval: Duration,
    /// File mode of --unix-socket, in octal; the default lets the owner and group connect.
    #[arg(long, env = "TICKD_UNIX_SOCKET_MODE", default_value = "660", value_parser = parse_mode)]
    pub unix_socket_mode: u32,
    /// Also serve grpc.health.v1 alone, in plaintext, on this address: for Kubernetes gRPC
    /// probes, which can do neither TLS nor tokens, when --listen uses TLS.
    #[arg(long, env = "TICKD_HEALTH_LISTEN")]
    pub health_listen: Option<SocketAddr>,
    /// Export traces over OTLP/gRPC to this collector (e.g. `http://otel-collector:4317`):
    /// spans of registration, firing, delivery and ack for timers registered under a
    /// sampled trace context. Off unless this or `OTEL_EXPORTER_OTLP_ENDPOINT` is set;
    /// `OTEL_SERVICE_NAME` names the service (`tickd` by default).
    #[arg(long, env = "TICKD_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Prometheus metrics listen address (`/metrics`).
    #[arg(long, env = "TICKD_METRICS_LISTEN", default_value = "0.0.0.0:9090")]
    pub metrics_listen: SocketAddr,
    /// Pending timers one namespace may hold (0: no quota beyond --max-pending).
    #[arg(long, env = "TICKD_MAX_PENDING_PER_NAMESPACE", default_value_t = 0)]
    pub max_pending_per_namespace: u64,
    /// How long shutdown waits for calls in progress before closing them.
    #[arg(long, env = "TICKD_DRAIN_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// `postgres://...`: keep timers in this shared PostgreSQL database instead of the local
    /// log, and share them with every replica pointed at it (see "Running more than one
    /// replica" in the README). --data-dir and --sync then do not apply. `?sslmode=` takes
    /// disable, prefer (the default), require, verify-ca or verify-full, as in libpq. The
    /// value is never shown (here or in logs): it may hold a password.
    #[arg(long, env = "TICKD_STORE", hide_env_values = true)]
    pub store: Option<StoreUrl>,
    /// PEM CA bundle the store database's certificate must chain to (or `sslrootcert=` in
    /// the --store URL): needed by sslmode=verify-ca and verify-full, and checked under
    /// prefer and require too when given.
    #[arg(long, env = "TICKD_STORE_CA_FILE", requires = "store")]
    pub store_ca_file: Option<PathBuf>,
    /// This replica's name in the database's lease tables (default: host name and process id).
    #[arg(long, env = "TICKD_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// Partitions the timers are hashed into; read only when tickd creates the schema.
    #[arg(long, env = "TICKD_PARTITIONS", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub partitions: u32,
    /// How long a replica's partition leases last without renewal: the longest a stopped
    /// replica's timers wait before another replica takes them over. Renewed every third of it.
    #[arg(long, env = "TICKD_LEASE_TTL", default_value = "10s", value_parser = parse_duration)]
    pub lease_ttl: Duration,
    /// How far ahead a replica loads its partitions' timers into its wheel.
    #[arg(long, env = "TICKD_LOAD_HORIZON", default_value = "60s", value_parser = parse_duration)]
    pub load_horizon: Duration,
    /// Connections each replica opens for API calls to the database.
    #[arg(long, env = "TICKD_STORE_CONNECTIONS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub store_connections: u32,
    #[arg(long, env = "TICKD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl Config {
    /// The push sinks, and what they all share.
    pub fn sinks(&self) -> SinkConfig {
        SinkConfig {
            sinks: self
                .sinks
                .iter()
                .flat_map(|specs| specs.0.iter().cloned())
                .collect(),
            allow: self.sink_allow.clone(),
            timeout: self.sink_timeout,
            max_in_flight: self.sink_max_in_flight,
            ca_file: self.sink_ca.clone(),
            client_cert: self.sink_client_cert.clone(),
            client_key: self.sink_client_key.clone(),
            token_file: self.sink_token_file.clone(),
            secret_files: self
                .sink_secret_file
                .iter()
                .map(|secret| (secret.namespace.clone(), secret.path.clone()))
                .collect(),
            rates: self.sink_rate.clone(),
        }
    }

    /// The embedded defaults, as if `tickd` were started with no arguments (`TICKD_*`
    /// environment variables still apply).
    pub fn defaults() -> Self {
        Self::parse_from(["tickd"])
    }

    /// The replicated mode's settings, for the store database at `url`, with the memory
    /// budget (see [`Self::memory_budget`]) that the replica charges what it holds to.
    pub(crate) fn cluster(
        &self,
        url: &str,
        memory: &std::sync::Arc<MemoryBudget>,
    ) -> Result<ClusterConfig, ClusterError> {
        if self.max_pending_per_namespace > 0 {
            return Err(ClusterError::Unsupported("--max-pending-per-namespace"));
        }
        // A delivery id carries its attempt in 16 bits, and the highest value marks an
        // expiration that went to the dead list as it fired (see `cluster::delivery`).
        if self.max_attempts >= u32::from(u16::MAX) {
            return Err(ClusterError::InvalidConfig(format!(
                "--max-attempts ({}) must be below {} with --store postgres",
                self.max_attempts,
                u16::MAX
            )));
        }
        if self.lease_ttl < Duration::from_secs(1) || self.load_horizon < Duration::from_secs(1) {
            return Err(ClusterError::InvalidConfig(format!(
                "--lease-ttl ({:?}) and --load-horizon ({:?}) must be at least 1s",
                self.lease_ttl, self.load_horizon
            )));
        }
        let replica_id = self
            .replica_id
            .clone()
            .unwrap_or_else(crate::cluster::default_replica_id);
        Ok(ClusterConfig {
            database: Database::new(url, self.store_ca_file.as_deref())?,
            replica_id,
            partitions: self.partitions,
            lease_ttl: self.lease_ttl,
            load_horizon: self.load_horizon,
            connections: self.store_connections,
            tick: self.tick,
            worker_queue: self.worker_queue,
            delivery: self.delivery(),
            max_namespaces: self.max_namespaces,
            memory: memory.clone(),
        })
    }

    /// The memory tickd can really have: its container's limit, else physical memory.
    pub fn memory_limit(&self) -> MemoryLimit {
        self.probe().memory_limit()
    }

    fn probe(&self) -> Probe {
        Probe {
            cgroup_root: self.cgroup_root.clone(),
            ..Probe::default()
        }
    }

    /// The memory budget in force: `--max-memory`, or its default from `within`, the
    /// memory tickd can have ([`Self::memory_limit`], read once at start-up). Its gauges
    /// are the metrics'.
    pub fn memory_budget(
        &self,
        metrics: &Metrics,
        within: &MemoryLimit,
    ) -> std::sync::Arc<MemoryBudget> {
        let (limit, source) = match self.max_memory {
            Some(ByteCount(0)) => (0, BudgetSource::Off),
            Some(ByteCount(bytes)) => (bytes, BudgetSource::Flag),
            None => within.default_budget(),
        };
        metrics
            .budgets
            .memory_budget
            .set(i64::try_from(limit).unwrap_or(i64::MAX));
        MemoryBudget::new(limit, source, metrics.budgets.memory_used.clone())
    }

    pub(crate) fn worker(&self, metrics: &Metrics) -> WorkerConfig {
        WorkerConfig {
            queue_capacity: self.worker_queue,
            busy_seconds: Some(metrics.worker_busy_seconds.clone()),
            // With a log, every answer waits for the group commit anyway, and durable calls
            // measured slower when senders applied them (median 0.9 of the worker thread's
            // rate, `--sync always`, 64 and 256 callers): the worker keeps them.
            combine_light_commands: self.sync == SyncMode::None,
            ..WorkerConfig::default()
        }
    }

    pub(crate) fn stream_limits(&self) -> StreamLimitsConfig {
        StreamLimitsConfig {
            max_subscribe_streams: self.max_subscribe_streams,
            max_subscribe_streams_per_connection: self.max_subscribe_streams_per_connection,
            max_keepalive_streams: self.max_keepalive_streams,
            max_keepalive_streams_per_connection: self.max_keepalive_streams_per_connection,
            max_observers: self.max_observers,
        }
    }

    pub(crate) fn delivery(&self) -> DeliveryConfig {
        DeliveryConfig {
            buffer_capacity: self.max_buffered,
            dead_capacity: self.max_dead,
            buffered_total: self.max_buffered_total,
            dead_total: self.max_dead_total,
            subscriber: SubscriberDefaults {
                ack_timeout: self.ack_timeout,
                max_unacked: self.max_unacked,
                ..SubscriberDefaults::DEFAULT
            },
            max_attempts: self.max_attempts,
        }
    }
}

/// What `tickd` does other than serve.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Read a data directory without changing it and report what recovery would find:
    /// each file's format and records, the live timers, and the first damage (file, byte
    /// offset, what is wrong). Exits with 1 when the damage would stop start-up.
    Check {
        /// The data directory (what --data-dir names).
        dir: PathBuf,
    },
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Config;
    use crate::domain::DeliveryConfig;

    /// The flags take their defaults from the domain's: started with none, tickd delivers
    /// by exactly the built-in bounds.
    #[test]
    fn the_flags_defaults_are_the_domains() {
        let config = Config::try_parse_from(["tickd"]).expect("no flags parse");
        assert_eq!(config.delivery(), DeliveryConfig::DEFAULT);
        assert_eq!(config.ack_timeout.as_secs(), 30, "shown and parsed as 30s");
    }
}
