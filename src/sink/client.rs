//! A sink's client, by transport: what the pusher calls to push one delivery, whatever
//! the sink is. Each transport reads the answer into a [`PushOutcome`], so pacing,
//! attempts, the circuit and acknowledgements stay the pusher's, the same for all.

use std::sync::Arc;
use std::time::Duration;

use super::allow::SinkAllow;
use super::connect::CONNECT_TIMEOUT;
use super::grpc::GrpcSink;
use super::http::HttpSink;
use super::nats::NatsSink;
use super::outcome::PushOutcome;
use super::redis::RedisSink;
use super::signing::Signing;
use super::spec::SinkTarget;
use super::tls::SinkSecurity;
use crate::domain::Delivered;

pub(crate) enum SinkClient {
    // Boxed where a client is large (a connection pool, a kept connection's state), so
    // that each variant is a pointer or two.
    Http(Box<HttpSink>),
    Grpc(GrpcSink),
    Nats(Box<NatsSink>),
    Redis(Box<RedisSink>),
}

impl SinkClient {
    /// A client for `target` that connects only where `allow` allows and gives each push
    /// `timeout` for its answer (beyond its connection's own time), with the TLS settings
    /// and token of `security`.
    pub(crate) fn new(
        target: SinkTarget,
        allow: Arc<SinkAllow>,
        timeout: Duration,
        security: Arc<SinkSecurity>,
    ) -> Result<Self, String> {
        Ok(match target {
            SinkTarget::Http(target) => {
                SinkClient::Http(Box::new(HttpSink::new(target, allow, timeout, security)))
            }
            SinkTarget::Grpc(target) => {
                SinkClient::Grpc(GrpcSink::new(target, allow, timeout, security)?)
            }
            SinkTarget::Nats(target) => {
                SinkClient::Nats(Box::new(NatsSink::new(target, allow, timeout)))
            }
            SinkTarget::Redis(target) => {
                SinkClient::Redis(Box::new(RedisSink::new(target, allow, timeout)))
            }
        })
    }

    /// Pushes one delivery, signed with `signing` if given, and reads what the sink made
    /// of it.
    pub(crate) async fn push(
        &self,
        delivered: &Delivered,
        signing: Option<&Signing>,
    ) -> PushOutcome {
        match self {
            SinkClient::Http(sink) => sink.push(delivered, signing).await,
            SinkClient::Grpc(sink) => sink.push(delivered, signing).await,
            SinkClient::Nats(sink) => sink.push(delivered, signing).await,
            SinkClient::Redis(sink) => sink.push(delivered, signing).await,
        }
    }

    /// The kind of sink, as its push spans name it.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            SinkClient::Http(_) => "http",
            SinkClient::Grpc(_) => "grpc",
            SinkClient::Nats(_) => "nats",
            SinkClient::Redis(_) => "redis",
        }
    }

    /// The longest a push may take beyond `timeout`: making its connection. An HTTP or
    /// gRPC push has `CONNECT_TIMEOUT` for it within its own deadline; a broker's kept
    /// connection may take longer (see [`NatsSink::connect_budget`]).
    pub(crate) fn connect_budget(&self) -> Duration {
        match self {
            SinkClient::Http(_) | SinkClient::Grpc(_) => CONNECT_TIMEOUT,
            SinkClient::Nats(sink) => sink.connect_budget(),
            SinkClient::Redis(sink) => sink.connect_budget(),
        }
    }
}
