//! The command line of `tickctl`: global connection flags and one subcommand per task.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "tickctl",
    version,
    about = "Command-line client of tickd, the timer service",
    after_help = "Durations are written like 1500ms, 30s, 5m, 2h or '1h 30m'.\n\
                  Exit codes: 0 ok, 1 the server refused the request (the gRPC code is named),\n\
                  2 bad usage, 3 tickd could not be reached."
)]
pub struct Cli {
    #[command(flatten)]
    pub connection: Connection,

    /// Namespace of the timers (empty: the default namespace; for `pending`, every namespace).
    #[arg(
        short,
        long,
        global = true,
        env = "TICKCTL_NAMESPACE",
        default_value = "",
        hide_default_value = true
    )]
    pub namespace: String,

    /// Output format.
    #[arg(
        short,
        long,
        global = true,
        env = "TICKCTL_OUTPUT",
        value_enum,
        default_value_t = Output::Text
    )]
    pub output: Output,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Connection {
    /// tickd's gRPC endpoint: `HOST:PORT`, `http://HOST:PORT`, `https://HOST:PORT` or `unix:PATH`.
    #[arg(
        long,
        global = true,
        env = "TICKCTL_ENDPOINT",
        default_value = "http://127.0.0.1:50051"
    )]
    pub endpoint: String,

    /// Bearer token sent with every call (`authorization: Bearer TOKEN`).
    #[arg(
        long,
        global = true,
        env = "TICKCTL_TOKEN",
        conflicts_with = "token_file",
        hide_env_values = true
    )]
    pub token: Option<String>,

    /// Read the bearer token from this file (surrounding whitespace is ignored).
    #[arg(long, global = true, env = "TICKCTL_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,

    /// PEM CA bundle to verify tickd's certificate with; turns TLS on (as does `https://`).
    #[arg(long, global = true, env = "TICKCTL_TLS_CA", value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,

    /// PEM client certificate, for tickd servers that require mutual TLS.
    #[arg(
        long,
        global = true,
        env = "TICKCTL_TLS_CERT",
        value_name = "PEM",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(
        long,
        global = true,
        env = "TICKCTL_TLS_KEY",
        value_name = "PEM",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,

    /// Name to verify tickd's certificate against (default: the endpoint's host).
    #[arg(
        long,
        global = true,
        env = "TICKCTL_TLS_SERVER_NAME",
        value_name = "NAME"
    )]
    pub tls_server_name: Option<String>,

    /// Connection timeout, and deadline of each unary call.
    #[arg(long, global = true, env = "TICKCTL_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Register a timer (NewTimeout); prints its id.
    Add(AddArgs),
    /// Register many timers in one call (NewTimeouts) from JSON lines; prints one result per line.
    AddBatch(AddBatchArgs),
    /// Cancel a pending timer; says whether it was still pending.
    Cancel(TargetArgs),
    /// Show one pending timer and the time it has left.
    Get(TargetArgs),
    /// Count and list pending timers (and dead expirations of a namespace).
    Pending(PendingArgs),
    /// Heartbeat a lease once: push its deadline to now + its ttl (or --ttl).
    Touch(TouchArgs),
    /// Keep leases alive over one KeepAlive stream, heartbeating every ttl/3 until Ctrl-C.
    Keepalive(KeepaliveArgs),
    /// Observe a namespace: print every expiration as it fires, without acknowledging.
    Watch(WatchArgs),
    /// Take expirations as a sharing subscriber, print and acknowledge each.
    Consume(ConsumeArgs),
    /// Acknowledge deliveries by their delivery ids.
    Ack(AckArgs),
    /// Ask tickd's standard gRPC health service whether it is serving.
    Health(HealthArgs),
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// Fire after this delay.
    #[arg(long, value_parser = duration, conflicts_with = "deadline")]
    pub delay: Option<Duration>,
    /// Fire at this time: RFC 3339, e.g. 2030-01-02T03:04:05Z or 2030-01-02T04:04:05+01:00.
    #[arg(long, value_parser = rfc3339)]
    pub deadline: Option<SystemTime>,
    /// Payload given on the command line.
    #[arg(long, conflicts_with = "payload_file")]
    pub payload: Option<String>,
    /// Read the payload from this file (`-`: standard input).
    #[arg(long, value_name = "FILE")]
    pub payload_file: Option<PathBuf>,
    /// Client key, unique within the namespace: adding an existing key returns that timer.
    #[arg(long)]
    pub key: Option<String>,
    /// Re-arm every interval after each firing.
    #[arg(long, value_parser = duration)]
    pub repeat: Option<Duration>,
    /// Make the timer a lease: heartbeats (touch, keepalive) push its deadline to now + ttl.
    #[arg(long, value_parser = duration)]
    pub ttl: Option<Duration>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Each non-empty input line is one JSON object with any of the fields\n\
  namespace, key, delay, deadline, payload, repeat, ttl (durations and deadline as strings,\n\
  e.g. {\"key\": \"order-42\", \"delay\": \"30m\", \"payload\": \"close order 42\"}).\n\
  A missing namespace means --namespace."
)]
pub struct AddBatchArgs {
    /// File of JSON lines (`-`: standard input).
    #[arg(default_value = "-")]
    pub file: PathBuf,
}

/// One timer, by id or by key.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct Target {
    /// The timer's id.
    pub id: Option<String>,
    /// The timer's client key instead of its id.
    #[arg(long)]
    pub key: Option<String>,
}

#[derive(Debug, Args)]
pub struct TargetArgs {
    #[command(flatten)]
    pub target: Target,
}

#[derive(Debug, Args)]
pub struct PendingArgs {
    /// List at most this many timers (0: only count them).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Timers asked for per call.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub page_size: u32,
    /// Also list the namespace's dead expirations (needs --namespace).
    #[arg(long)]
    pub dead: bool,
}

#[derive(Debug, Args)]
pub struct TouchArgs {
    #[command(flatten)]
    pub target: Target,
    /// New ttl (default: the timer's own).
    #[arg(long, value_parser = duration)]
    pub ttl: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct KeepaliveArgs {
    /// Ids of the leases to keep alive.
    #[arg(required_unless_present = "keys")]
    pub ids: Vec<String>,
    /// Keys of leases to keep alive (repeatable).
    #[arg(long = "key", value_name = "KEY")]
    pub keys: Vec<String>,
    /// Ttl sent with every heartbeat (default: each lease's own, read with Get).
    #[arg(long, value_parser = duration)]
    pub ttl: Option<Duration>,
    /// Time between heartbeats (default: a third of the shortest ttl).
    #[arg(long, value_parser = duration)]
    pub interval: Option<Duration>,
    /// Stop after this many rounds of heartbeats (default: until Ctrl-C).
    #[arg(long)]
    pub count: Option<u64>,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Stop after this many expirations (default: until Ctrl-C).
    #[arg(long)]
    pub count: Option<u64>,
}

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Stop after this many expirations (default: until Ctrl-C).
    #[arg(long)]
    pub count: Option<u64>,
    /// Time to acknowledge before a delivery is made again (default: the server's).
    #[arg(long, value_parser = duration)]
    pub ack_timeout: Option<Duration>,
    /// Unacknowledged deliveries held at once (default: the server's).
    #[arg(long)]
    pub max_unacked: Option<u32>,
    /// Ask the server to count deliveries as acknowledged when sent (at-most-once).
    #[arg(long)]
    pub auto_ack: bool,
}

#[derive(Debug, Args)]
pub struct AckArgs {
    /// Delivery ids, as printed by `consume`.
    #[arg(required = true)]
    pub delivery_ids: Vec<String>,
}

#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Service to ask about (empty: the server as a whole).
    #[arg(long, default_value = "tickd.v1.Timers")]
    pub service: String,
}

/// `1500ms`, `30s`, `2h`, `1h 30m`.
pub fn duration(text: &str) -> Result<Duration, String> {
    tickd::config::parse_duration(text)
}

/// RFC 3339 with `Z` or a numeric offset (`+01:00`); seconds fractions optional.
pub fn rfc3339(text: &str) -> Result<SystemTime, String> {
    let invalid = |why: &dyn std::fmt::Display| {
        format!("invalid RFC 3339 time {text:?} (like 2030-01-02T03:04:05Z): {why}")
    };
    let text = text.trim();
    let (local, offset_secs) = split_offset(text).ok_or_else(|| invalid(&"bad UTC offset"))?;
    let utc = humantime::parse_rfc3339_weak(local).map_err(|error| invalid(&error))?;
    let offset = Duration::from_secs(offset_secs.unsigned_abs());
    // A local time east of UTC (+hh:mm) is that much earlier in UTC.
    let adjusted = if offset_secs >= 0 {
        utc.checked_sub(offset)
    } else {
        utc.checked_add(offset)
    };
    adjusted.ok_or_else(|| invalid(&"out of range"))
}

/// Splits `2030-01-02T03:04:05+01:00` into the local part and the offset in seconds.
fn split_offset(text: &str) -> Option<(&str, i64)> {
    if let Some(local) = text.strip_suffix('Z').or_else(|| text.strip_suffix('z')) {
        return Some((local, 0));
    }
    // A numeric offset is the last six characters: `+hh:mm` or `-hh:mm`, after the time.
    let tail_start = text.len().checked_sub(6)?;
    let tail = text.get(tail_start..)?;
    let sign = match tail.as_bytes()[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return Some((text, 0)), // no offset: UTC
    };
    if !text[..tail_start].contains(['T', 't', ' ']) {
        return Some((text, 0));
    }
    let hours: i64 = tail.get(1..3)?.parse().ok()?;
    let minutes: i64 = tail.get(4..6)?.parse().ok()?;
    if tail.as_bytes()[3] != b':' || hours > 23 || minutes > 59 {
        return None;
    }
    Some((&text[..tail_start], sign * (hours * 3600 + minutes * 60)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_applied() {
        let utc = rfc3339("2030-01-02T03:04:05Z").unwrap();
        assert_eq!(rfc3339("2030-01-02T04:04:05+01:00").unwrap(), utc);
        assert_eq!(rfc3339("2030-01-02T01:34:05-01:30").unwrap(), utc);
        assert_eq!(rfc3339("2030-01-02T03:04:05").unwrap(), utc);
        assert!(rfc3339("2030-01-02T03:04:05+25:00").is_err());
        assert!(rfc3339("tomorrow").is_err());
    }
}
