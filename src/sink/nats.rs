//! A NATS JetStream sink (`nats://HOST[:PORT]/SUBJECT`): each expiration is published to
//! the subject, and the stream's PubAck acknowledges it. Why JetStream and not core NATS:
//! a core publish is fire-and-forget, nothing says a subscriber has it; a PubAck says the
//! stream stored it, which is what an acknowledgement to tickd must mean.
//!
//! Each message carries `Nats-Msg-Id`, the expiration's idempotency key (the same for
//! every attempt and across restarts), so that the stream's duplicate window stores an
//! expiration pushed twice (its PubAck lost, say) once; and `Tickd-Delivery-Id`,
//! `Tickd-Attempt`, `Tickd-Namespace` and `Content-Type` as an HTTP push has them. The
//! body is the expiration as HTTP sends it (proto3 JSON, or `#protobuf`).
//!
//! Connections: one client per sink, kept ([`KeptConnection`]). It is given the address
//! `--sink-allow` allowed, never the host's name (so DNS cannot send a reconnection
//! elsewhere), and no server the cluster announces. The client's own reconnections go
//! only to that address, and only while it is still allowed: each is checked again first
//! ([`recheck`]). A client that gives up, or whose address is no longer allowed, is
//! replaced on the next push by a new one, resolved and checked afresh.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::context::{PublishErrorKind, PublishErrorKind as Kind};
use async_nats::{ConnectOptions, Event, HeaderMap, ReconnectToServer, Server, ServerInfo};

use super::allow::SinkAllow;
use super::body::PushBody;
use super::broker_url::BrokerUrl;
use super::connect::{each_allowed_address, CONNECT_TIMEOUT};
use super::kept::{kept_connection_budget, InUse, KeptConnection};
use super::outcome::PushOutcome;
use super::signing::Signing;
use crate::domain::{with_causes, Delivered};

const EXAMPLE: &str = "nats://127.0.0.1:4222/tickd.expirations";
/// NATS' own port.
const DEFAULT_PORT: u16 = 4222;
/// Reconnections a client makes on its own before it gives up and the next push makes a
/// new client (which resolves the host again, in case it moved).
const RECONNECTIONS: usize = 3;

/// A `nats://` sink: where to connect, and the subject each expiration is published to.
#[derive(Clone)]
pub(crate) struct NatsTarget {
    pub(crate) broker: BrokerUrl,
}

/// Reads `nats://[USER[:PASSWORD]@]HOST[:PORT]/SUBJECT[#protobuf]`. A user without a
/// password is a token.
pub(crate) fn nats_target(url: &str) -> Result<NatsTarget, String> {
    let broker = BrokerUrl::parse(url, "nats", DEFAULT_PORT, EXAMPLE)?;
    let subject = &broker.name;
    let valid = !subject.starts_with('.')
        && !subject.ends_with('.')
        && !subject.contains("..")
        && subject.split('.').all(|token| token != "*" && token != ">")
        && !subject.chars().any(|c| c.is_whitespace() || c.is_control());
    if !valid {
        return Err(format!(
            "{subject:?} is not a subject to publish to (dot-separated tokens, no \
             wildcards or spaces), as in {EXAMPLE}"
        ));
    }
    Ok(NatsTarget { broker })
}

/// One client of a sink, with what its callbacks found out about it.
#[derive(Clone)]
struct NatsConnection {
    jetstream: async_nats::jetstream::Context,
    client: async_nats::Client,
    /// Closed by the client, or its address no longer allowed: replace it.
    retired: Arc<AtomicBool>,
}

pub(crate) struct NatsSink {
    target: NatsTarget,
    allow: Arc<SinkAllow>,
    timeout: Duration,
    connection: KeptConnection<NatsConnection>,
}

impl NatsSink {
    pub(crate) fn new(target: NatsTarget, allow: Arc<SinkAllow>, timeout: Duration) -> Self {
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

    /// Publishes one delivery and reads its PubAck.
    pub(crate) async fn push(
        &self,
        delivered: &Delivered,
        signing: Option<&Signing>,
    ) -> PushOutcome {
        let connected = self
            .connection
            .get(
                |connection| !connection.retired.load(Ordering::SeqCst),
                self.connect_budget(),
                || self.connect(),
            )
            .await;
        let InUse {
            connection,
            generation,
        } = match connected {
            Ok(in_use) => in_use,
            Err(reason) => return PushOutcome::Unreachable { reason },
        };
        // A client between connections would queue the message until it reconnects: the
        // push would wait for nothing, and count as an attempt.
        if connection.client.connection_state() != async_nats::connection::State::Connected {
            return PushOutcome::Unreachable {
                reason: format!("not connected to {}", self.target.broker),
            };
        }
        let body = PushBody::of(delivered, self.target.broker.body, signing);
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", body.labels.idempotency_key.as_str());
        headers.insert("Content-Type", body.content_type);
        headers.insert("Tickd-Delivery-Id", body.labels.delivery_id.as_str());
        headers.insert("Tickd-Attempt", delivered.attempt.to_string().as_str());
        headers.insert("Tickd-Namespace", body.labels.namespace.as_str());
        for (name, value) in delivered
            .expiration
            .trace
            .iter()
            .flat_map(|trace| trace.headers())
        {
            headers.insert(name, value);
        }
        if let Some(signature) = &body.labels.signature {
            headers.insert("webhook-id", signature.id.as_str());
            headers.insert("webhook-timestamp", signature.timestamp.as_str());
            headers.insert("webhook-signature", signature.signatures.as_str());
        }
        let published = tokio::time::timeout(self.timeout, async {
            let acknowledgement = connection
                .jetstream
                .publish_with_headers(self.target.broker.name.clone(), headers, body.bytes)
                .await
                .map_err(Sent::No)?;
            acknowledgement.await.map_err(Sent::Yes)
        })
        .await;
        match published {
            Ok(Ok(_ack)) => PushOutcome::Delivered,
            // The message may have reached the stream: an attempt, asked again later.
            Err(_) => PushOutcome::Retry { after: None },
            Ok(Err(Sent::No(error))) => {
                if error.kind() == Kind::BrokenPipe {
                    self.connection.lost(generation);
                }
                outcome_of_publish_error(error.kind(), false, &error)
            }
            Ok(Err(Sent::Yes(error))) => outcome_of_publish_error(error.kind(), true, &error),
        }
    }

    /// A client connected to the first allowed address of the sink's host that answers
    /// ([`each_allowed_address`]: each address within its own `CONNECT_TIMEOUT`).
    async fn connect(&self) -> Result<NatsConnection, String> {
        let broker = &self.target.broker;
        each_allowed_address(&self.allow, &broker.host, broker.port, |address| {
            self.connect_to(address)
        })
        .await
        .map_err(|failure| failure.describe(broker))
    }

    /// A client of the one address given, which it keeps to when it reconnects.
    async fn connect_to(
        &self,
        address: SocketAddr,
    ) -> Result<NatsConnection, async_nats::ConnectError> {
        let retired = Arc::new(AtomicBool::new(false));
        let client = self
            .options(address, &retired)
            .connect(format!("nats://{address}"))
            .await?;
        let mut jetstream = async_nats::jetstream::new(client.clone());
        jetstream.set_timeout(self.timeout);
        Ok(NatsConnection {
            jetstream,
            client,
            retired,
        })
    }

    fn options(&self, address: SocketAddr, retired: &Arc<AtomicBool>) -> ConnectOptions {
        let broker = &self.target.broker;
        let mut options = match (&broker.user, &broker.password) {
            (Some(user), Some(password)) => {
                ConnectOptions::with_user_and_password(user.clone(), password.clone())
            }
            (Some(token), None) => ConnectOptions::with_token(token.clone()),
            _ => ConnectOptions::new(),
        };
        let closed = retired.clone();
        let check = Recheck {
            allow: self.allow.clone(),
            host: broker.host.clone(),
            port: broker.port,
            address,
            retired: retired.clone(),
        };
        options = options
            .name("tickd")
            .ignore_discovered_servers()
            .retain_servers_order()
            .connection_timeout(CONNECT_TIMEOUT)
            .request_timeout(Some(self.timeout))
            .max_reconnects(RECONNECTIONS)
            .event_callback(move |event| {
                if matches!(event, Event::Closed) {
                    closed.store(true, Ordering::SeqCst);
                }
                async {}
            })
            .reconnect_to_server_callback(move |servers, info| {
                recheck(check.clone(), servers, info)
            });
        options
    }
}

/// Whether a failed publish's message had left tickd.
enum Sent {
    No(async_nats::jetstream::context::PublishError),
    Yes(async_nats::jetstream::context::PublishError),
}

/// What a publish that failed with `kind` makes of the push. `sent`: the message went out
/// and the stream (or the connection) answered with this error.
fn outcome_of_publish_error(
    kind: PublishErrorKind,
    sent: bool,
    error: &dyn std::error::Error,
) -> PushOutcome {
    match kind {
        // No stream takes the subject (the server's "no responders"): the sink is up and
        // refuses it, as an HTTP 404 would be.
        Kind::StreamNotFound => PushOutcome::Rejected { status: 404 },
        // Too large for the server: as 413.
        Kind::MaxPayloadExceeded => PushOutcome::Rejected { status: 413 },
        // The stream's own expectations (no message of tickd's sets them): as 412.
        Kind::WrongLastMessageId | Kind::WrongLastSequence => PushOutcome::Rejected { status: 412 },
        // Not sent (the connection is gone): as an unreachable sink, no attempt.
        Kind::BrokenPipe if !sent => PushOutcome::Unreachable {
            reason: with_causes(error),
        },
        // No PubAck in time, the connection lost after sending, too many PubAcks awaited,
        // or the stream failing to store it (out of space, no quorum): asked again later.
        _ => PushOutcome::Retry { after: None },
    }
}

/// What a client's reconnection callback needs to check its address again.
#[derive(Clone)]
struct Recheck {
    allow: Arc<SinkAllow>,
    host: String,
    port: u16,
    address: SocketAddr,
    retired: Arc<AtomicBool>,
}

/// Before each of the client's own reconnections: the one address it was given, if the
/// sink's host still resolves to it and `--sink-allow` still allows it. Otherwise the
/// client is retired (the next push makes a new one) and this reconnection never
/// happens: the future stays pending, parking the retired client's connection task, which
/// ends with tickd. That takes a change to the host's DNS or to an allowed name's address
/// under a live connection, and costs one idle task each time.
async fn recheck(
    check: Recheck,
    servers: Vec<Server>,
    _info: ServerInfo,
) -> Option<ReconnectToServer> {
    let server = servers.into_iter().next()?;
    // The lookup runs on a task of its own: the callback's future must be `Sync`, which a
    // resolver's future need not be.
    let allowed = tokio::spawn({
        let check = check.clone();
        async move { check.allow.allowed_addresses(&check.host, check.port).await }
    })
    .await;
    match allowed {
        Ok(Ok(addresses)) if addresses.contains(&check.address) => Some(ReconnectToServer {
            addr: server.addr,
            delay: None,
        }),
        _ => {
            check.retired.store(true, Ordering::SeqCst);
            std::future::pending().await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_is_a_literal_subject() {
        let target = nats_target("nats://app:pw@localhost/tickd.expired").unwrap();
        assert_eq!(target.broker.name, "tickd.expired");
        assert_eq!(target.broker.port, 4222);
        assert_eq!(target.broker.user.as_deref(), Some("app"));
        assert_eq!(
            target.broker.to_string(),
            "nats://localhost:4222/tickd.expired"
        );
        for subject in ["a.*", "a.%3E", ".a", "a..b", "a%20b"] {
            let error = nats_target(&format!("nats://127.0.0.1/{subject}"))
                .map(|_| ())
                .unwrap_err();
            assert!(error.contains("not a subject"), "{subject}: {error}");
        }
    }

    #[test]
    fn pub_ack_errors_are_refusals_retries_or_unreachable() {
        let error = std::io::Error::other("test");
        let outcome = |kind, sent| outcome_of_publish_error(kind, sent, &error);
        assert_eq!(
            outcome(Kind::StreamNotFound, true),
            PushOutcome::Rejected { status: 404 }
        );
        assert_eq!(
            outcome(Kind::TimedOut, true),
            PushOutcome::Retry { after: None }
        );
        assert_eq!(
            outcome(Kind::Other, true),
            PushOutcome::Retry { after: None }
        );
        assert_eq!(
            outcome(Kind::BrokenPipe, true),
            PushOutcome::Retry { after: None }
        );
        assert!(matches!(
            outcome(Kind::BrokenPipe, false),
            PushOutcome::Unreachable { .. }
        ));
    }
}
