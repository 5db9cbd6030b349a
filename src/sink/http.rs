//! An HTTP sink: one POST per expiration on kept-alive connections, made only to
//! addresses `--sink-allow` allows (see [`super::connect`]), each within the push timeout;
//! `https://` over TLS ([`super::tls`]).
//!
//! HTTP/1.1 takes a connection per push in flight, and a write and a read of its own per
//! push. HTTP/2 carries every push as a stream of one connection, many pushes to a write:
//! spoken when an `https://` sink's server chooses `h2` in the TLS handshake, or from the
//! first byte to an `http://` sink given `#h2c` (prior knowledge: the sink must speak it).
//!
//! Each push carries headers a receiver needs to deduplicate and to report:
//! `Idempotency-Key` (the same for every attempt at one expiration, across restarts),
//! `Tickd-Delivery-Id` and `Tickd-Attempt` (one attempt), and `Tickd-Namespace`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Body as _;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::allow::SinkAllow;
use super::body::PushBody;
use super::connect::{sink_refusal, CONNECT_TIMEOUT};
use super::outcome::PushOutcome;
use super::signing::Signing;
use super::spec::HttpTarget;
use super::tls::{SinkConnector, SinkSecurity};
use crate::domain::{with_causes, Delivered};

/// Idle connections kept per sink host: enough for its in-flight limit to reuse them.
const IDLE_CONNECTIONS_PER_HOST: usize = 256;
/// The most of an answer's body read to give its connection back to the pool: a sink's
/// answer says what it says by its status, and its body is never kept.
const DRAINED_AT_MOST: usize = 64 * 1024;
/// An HTTP/2 connection carries every push: a ping when it has been quiet this long, and
/// closed if the ping is not answered within [`PING_TIMEOUT`], so that pushes never queue
/// on a connection the network dropped without a word.
const PING_INTERVAL: Duration = Duration::from_secs(10);
const PING_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) struct HttpSink {
    client: Client<SinkConnector, Full<Bytes>>,
    target: HttpTarget,
    timeout: Duration,
    security: Arc<SinkSecurity>,
}

impl HttpSink {
    pub(crate) fn new(
        target: HttpTarget,
        allow: Arc<SinkAllow>,
        timeout: Duration,
        security: Arc<SinkSecurity>,
    ) -> Self {
        let tls = match target.uses_tls() {
            true => security.tls_for(&[b"h2", b"http/1.1"]),
            false => None,
        };
        let connector = SinkConnector::new(allow, tls);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(IDLE_CONNECTIONS_PER_HOST)
            .http2_only(target.h2c)
            .timer(TokioTimer::new())
            .http2_keep_alive_interval(PING_INTERVAL)
            .http2_keep_alive_timeout(PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(connector);
        Self {
            client,
            target,
            timeout,
            security,
        }
    }

    /// Pushes one delivery and reads what the sink made of it.
    pub(crate) async fn push(
        &self,
        delivered: &Delivered,
        signing: Option<&Signing>,
    ) -> PushOutcome {
        let request = match self.request(delivered, signing) {
            Ok(request) => request,
            Err(error) => {
                return PushOutcome::Unreachable {
                    reason: format!("building the request: {error}"),
                }
            }
        };
        // The connection's own time is the connector's (`CONNECT_TIMEOUT` an address), on
        // top of the answer's: a sink that drops connection attempts is unreachable (no
        // attempt), not late.
        let answered = tokio::time::timeout(self.timeout + CONNECT_TIMEOUT, async {
            let response = self.client.request(request).await?;
            let (parts, body) = response.into_parts();
            // The status settles the push; a body is read to its end apart, so that the
            // connection goes back to the pool, and a body that never ends cannot turn a
            // 2xx into a failed attempt. The usual answer (204, or an empty 200) has
            // nothing left to read: dropping it hands the connection back at once.
            // An answer's body is read up to `DRAINED_AT_MOST` and dropped; a longer one
            // closes its HTTP/1.1 connection (or resets its HTTP/2 stream) instead of
            // holding memory for it.
            if !body.is_end_stream() {
                tokio::spawn(tokio::time::timeout(self.timeout, async move {
                    let _ = Limited::new(body, DRAINED_AT_MOST).collect().await;
                }));
            }
            Ok::<_, hyper_util::client::legacy::Error>(parts)
        })
        .await;
        match answered {
            Ok(Ok(parts)) => PushOutcome::of_answer(parts.status, &parts.headers),
            // The request may have reached the sink: an attempt, asked again later.
            Err(_) => PushOutcome::Retry { after: None },
            Ok(Err(error)) if error.is_connect() => PushOutcome::Unreachable {
                // A refusal by `--sink-allow` says so itself; other errors need their causes.
                reason: match sink_refusal(&error) {
                    Some(refused) => refused.to_string(),
                    None => with_causes(&error),
                },
            },
            // Sent, and the connection failed before an answer: as a timeout.
            Ok(Err(_)) => PushOutcome::Retry { after: None },
        }
    }

    fn request(
        &self,
        delivered: &Delivered,
        signing: Option<&Signing>,
    ) -> Result<Request<Full<Bytes>>, hyper::http::Error> {
        let body = PushBody::of(delivered, self.target.body, signing);
        let labels = body.labels;
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.target.uri.clone())
            .header(CONTENT_TYPE, body.content_type)
            .header("idempotency-key", once(labels.idempotency_key)?)
            .header("tickd-delivery-id", once(labels.delivery_id)?)
            .header("tickd-attempt", delivered.attempt)
            .header("tickd-namespace", labels.namespace);
        if let Some(signature) = labels.signature {
            request = request
                .header("webhook-id", once(signature.id)?)
                .header("webhook-timestamp", signature.timestamp)
                .header("webhook-signature", once(signature.signatures)?);
        }
        for (name, value) in delivered
            .expiration
            .trace
            .iter()
            .flat_map(|trace| trace.headers())
        {
            request = request.header(name, value);
        }
        // The URL's own credentials first, then --sink-token-file's.
        if let Some(authorization) = &self.target.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        } else if let Some(authorization) = self.security.authorization() {
            request = request.header(AUTHORIZATION, authorization);
        }
        request.body(Full::new(body.bytes))
    }
}

/// A header value no other push repeats (its key, its delivery id). Over HTTP/2 it is
/// marked never to be indexed: HPACK's table keeps what headers repeat, and a value seen
/// once would only push those out (and cost its insertion) on every push.
fn once(value: String) -> Result<HeaderValue, hyper::http::Error> {
    let mut value = HeaderValue::try_from(value)?;
    value.set_sensitive(true);
    Ok(value)
}
