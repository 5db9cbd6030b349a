//! A Redis Streams sink (`redis://[USER:PASSWORD@]HOST[:PORT]/STREAM`): each expiration
//! is appended to the stream with `XADD STREAM * ...`, and the entry id Redis answers
//! with acknowledges it. Why a stream and not a list or a channel: a stream keeps what
//! was added for consumer groups to read and acknowledge at their pace, as a
//! Subscribe stream does, where a channel forgets what nobody was listening for.
//!
//! An entry's fields: `expiration` (the expiration as HTTP sends it: proto3 JSON, or
//! `#protobuf`), `idempotency_key` (the same for every attempt and across restarts; a
//! stream does not deduplicate, so a consumer that must see each expiration once drops
//! keys it has seen), `delivery_id`, `attempt`, `namespace` and `timer_id`.
//!
//! Connections: one multiplexed connection per sink, kept ([`KeptConnection`]) and made
//! again when lost, each time to an address the host resolves to now and `--sink-allow`
//! allows, handed to the client as that address (so DNS cannot send it elsewhere). The
//! URL's user and password authenticate it (`AUTH`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ErrorKind, IntoConnectionInfo, RedisConnectionInfo,
    RedisError, ServerErrorKind,
};

use super::allow::SinkAllow;
use super::body::PushBody;
use super::broker_url::BrokerUrl;
use super::connect::each_allowed_address;
use super::kept::{kept_connection_budget, InUse, KeptConnection};
use super::outcome::PushOutcome;
use super::signing::Signing;
use crate::domain::{with_causes, Delivered};

const EXAMPLE: &str = "redis://127.0.0.1:6379/tickd-expirations";
/// Redis' own port.
const DEFAULT_PORT: u16 = 6379;

/// A `redis://` sink: where to connect, and the stream each expiration is added to.
#[derive(Clone)]
pub(crate) struct RedisTarget {
    pub(crate) broker: BrokerUrl,
}

/// Reads `redis://[[USER]:PASSWORD@]HOST[:PORT]/STREAM[#protobuf]`: the path is the
/// stream's key (percent-decoded), not a database number.
pub(crate) fn redis_target(url: &str) -> Result<RedisTarget, String> {
    let broker = BrokerUrl::parse(url, "redis", DEFAULT_PORT, EXAMPLE)?;
    if broker.user.is_some() && broker.password.is_none() {
        return Err(format!(
            "give a password after the user (redis://:PASSWORD@HOST/... without a user), \
             as in {EXAMPLE}"
        ));
    }
    Ok(RedisTarget { broker })
}

pub(crate) struct RedisSink {
    target: RedisTarget,
    allow: Arc<SinkAllow>,
    timeout: Duration,
    connection: KeptConnection<MultiplexedConnection>,
}

impl RedisSink {
    pub(crate) fn new(target: RedisTarget, allow: Arc<SinkAllow>, timeout: Duration) -> Self {
        Self {
            target,
            allow,
            timeout,
            connection: KeptConnection::new(),
        }
    }

    /// See [`kept_connection_budget`].
    pub(crate) fn connect_budget(&self) -> Duration {
        kept_connection_budget(self.timeout)
    }

    /// Adds one delivery to the stream.
    pub(crate) async fn push(
        &self,
        delivered: &Delivered,
        signing: Option<&Signing>,
    ) -> PushOutcome {
        let InUse {
            mut connection,
            generation,
        } = match self
            .connection
            .get(|_| true, self.connect_budget(), || self.connect())
            .await
        {
            Ok(in_use) => in_use,
            Err(reason) => return PushOutcome::Unreachable { reason },
        };
        let body = PushBody::of(delivered, self.target.broker.body, signing);
        let mut command = redis::cmd("XADD");
        command
            .arg(&self.target.broker.name)
            .arg("*")
            .arg("expiration")
            .arg(body.bytes.as_ref())
            .arg("idempotency_key")
            .arg(&body.labels.idempotency_key)
            .arg("delivery_id")
            .arg(&body.labels.delivery_id)
            .arg("attempt")
            .arg(delivered.attempt)
            .arg("namespace")
            .arg(&body.labels.namespace)
            .arg("timer_id")
            .arg(delivered.expiration.id.to_string());
        for (name, value) in delivered
            .expiration
            .trace
            .iter()
            .flat_map(|trace| trace.headers())
        {
            command.arg(name).arg(value);
        }
        if let Some(signature) = &body.labels.signature {
            command
                .arg("webhook_id")
                .arg(&signature.id)
                .arg("webhook_timestamp")
                .arg(&signature.timestamp)
                .arg("webhook_signature")
                .arg(&signature.signatures);
        }
        let added =
            tokio::time::timeout(self.timeout, command.query_async::<String>(&mut connection))
                .await;
        match added {
            Ok(Ok(_entry_id)) => PushOutcome::Delivered,
            // The entry may have been added: an attempt, asked again later.
            Err(_) => PushOutcome::Retry { after: None },
            Ok(Err(error)) => {
                let outcome = outcome_of_error(&error);
                if error.is_unrecoverable_error() || error.is_io_error() {
                    self.connection.lost(generation);
                }
                outcome
            }
        }
    }

    /// A connection to the first allowed address of the sink's host that answers
    /// ([`each_allowed_address`]: each address within its own `CONNECT_TIMEOUT`),
    /// authenticated with the URL's credentials.
    async fn connect(&self) -> Result<MultiplexedConnection, String> {
        let broker = &self.target.broker;
        let mut settings = RedisConnectionInfo::default();
        if let Some(user) = broker.user.as_deref().filter(|user| !user.is_empty()) {
            settings = settings.set_username(user);
        }
        if let Some(password) = &broker.password {
            settings = settings.set_password(password);
        }
        // The address's time is `each_allowed_address`'s; the client's own default (a
        // second) would cut it short.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(Some(self.timeout));
        each_allowed_address(&self.allow, &broker.host, broker.port, |address| {
            connect_to(address, &settings, &config)
        })
        .await
        .map_err(|failure| failure.describe(broker))
    }
}

/// A connection to the one address given, never to a name that could resolve elsewhere.
async fn connect_to(
    address: SocketAddr,
    settings: &RedisConnectionInfo,
    config: &AsyncConnectionConfig,
) -> Result<MultiplexedConnection, RedisError> {
    let info = ConnectionAddr::Tcp(address.ip().to_string(), address.port())
        .into_connection_info()?
        .set_redis_settings(settings.clone());
    redis::Client::open(info)?
        .get_multiplexed_async_connection_with_config(config)
        .await
}

/// What an XADD that failed with `error` makes of the push.
fn outcome_of_error(error: &RedisError) -> PushOutcome {
    match error.kind() {
        // The connection was gone before the command went (or broke on the way): as an
        // unreachable sink, no attempt.
        _ if error.is_connection_dropped() || error.is_connection_refusal() => {
            PushOutcome::Unreachable {
                reason: with_causes(error),
            }
        }
        // Busy, loading, out of memory, a replica or a cluster between states: the sink
        // is up and asks for it again later, as a 503.
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly,
        )
        | ErrorKind::Io => PushOutcome::Retry { after: None },
        _ if error.code() == Some("OOM") => PushOutcome::Retry { after: None },
        // Credentials refused or missing: as HTTP's 401 and 403.
        ErrorKind::AuthenticationFailed => PushOutcome::Rejected { status: 401 },
        ErrorKind::Server(ServerErrorKind::NoPerm) => PushOutcome::Rejected { status: 403 },
        _ if error.code() == Some("NOAUTH") => PushOutcome::Rejected { status: 403 },
        // Anything else (the key holds something other than a stream, say): the sink
        // refuses this push, as a 4xx.
        _ => PushOutcome::Rejected { status: 400 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_the_path_and_credentials_need_a_password() {
        let target = redis_target("redis://:pw@127.0.0.1/tickd%3Aexpired").unwrap();
        assert_eq!(target.broker.name, "tickd:expired");
        assert_eq!(target.broker.port, 6379);
        assert_eq!(target.broker.password.as_deref(), Some("pw"));
        assert!(!target.broker.to_string().contains("pw"));
        let error = redis_target("redis://app@127.0.0.1/s")
            .map(|_| ())
            .unwrap_err();
        assert!(error.contains("give a password"), "{error}");
    }

    #[test]
    fn server_errors_are_retried_or_refused() {
        let server = |kind, detail: &str| RedisError::from((kind, "test", detail.to_owned()));
        assert_eq!(
            outcome_of_error(&server(ErrorKind::AuthenticationFailed, "")),
            PushOutcome::Rejected { status: 401 }
        );
        assert_eq!(
            outcome_of_error(&server(ErrorKind::Server(ServerErrorKind::ReadOnly), "")),
            PushOutcome::Retry { after: None }
        );
        let dropped = RedisError::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(matches!(
            outcome_of_error(&dropped),
            PushOutcome::Unreachable { .. }
        ));
    }
}
