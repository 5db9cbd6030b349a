//! A gRPC sink: the app implements `tickd.v1.Sink` (proto/tickd/v1/sink.proto) and tickd
//! calls its `Deliver` once per expiration and attempt, every call multiplexed on one
//! HTTP/2 connection. The connection is made by [`SinkConnector`] (the `--sink-allow`
//! check on the resolved address, then TLS for `grpcs://`), again whenever it drops.
//!
//! Each call carries the metadata an HTTP push carries as headers (`idempotency-key`,
//! `tickd-delivery-id`, `tickd-attempt`, `tickd-namespace`, and `authorization` with
//! `--sink-token-file`); the status answered settles the attempt ([`outcome_of_status`]).

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, ConnectError, Request, Status};

use super::allow::SinkAllow;
use super::body::PushLabels;
use super::connect::{sink_refusal, CONNECT_TIMEOUT};
use super::outcome::{retry_after, PushOutcome};
use super::signing::Signing;
use super::spec::GrpcTarget;
use super::tls::{SinkConnector, SinkSecurity};
use crate::domain::{with_causes, Delivered};
use crate::proto::sink_client::SinkClient;
use crate::proto::DeliverRequest;

pub(crate) struct GrpcSink {
    client: SinkClient<Channel>,
    timeout: Duration,
    security: Arc<SinkSecurity>,
}

impl GrpcSink {
    pub(crate) fn new(
        target: GrpcTarget,
        allow: Arc<SinkAllow>,
        timeout: Duration,
        security: Arc<SinkSecurity>,
    ) -> Result<Self, String> {
        let tls = match target.tls {
            true => security.tls_for(&[b"h2"]),
            false => None,
        };
        let connector = SinkConnector::new(allow, tls);
        // The connector makes TLS itself, so the channel is given `http://` (tonic would
        // want its own TLS for `https://`); the calls' URIs say `https` for grpcs://.
        let host_and_port = format!("{}:{}", target.host, target.port);
        let scheme = if target.tls { "https" } else { "http" };
        let origin = format!("{scheme}://{host_and_port}")
            .parse()
            .map_err(|error| format!("{target}: {error}"))?;
        let endpoint = Endpoint::from_shared(format!("http://{host_and_port}"))
            .and_then(|endpoint| {
                endpoint
                    .origin(origin)
                    .user_agent(concat!("tickd/", env!("CARGO_PKG_VERSION")))
            })
            .map_err(|error| format!("{target}: {error}"))?;
        let channel = endpoint
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20))
            .connect_with_connector_lazy(connector);
        Ok(Self {
            client: SinkClient::new(channel),
            timeout,
            security,
        })
    }

    /// Calls Deliver once and reads what the sink made of it.
    pub(crate) async fn push(
        &self,
        delivered: &Delivered,
        signing: Option<&Signing>,
    ) -> PushOutcome {
        let request = match self.request(delivered, signing) {
            Ok(request) => request,
            Err(reason) => return PushOutcome::Unreachable { reason },
        };
        let mut client = self.client.clone();
        // As for HTTP: the connection's own time on top of the answer's.
        let answered =
            tokio::time::timeout(self.timeout + CONNECT_TIMEOUT, client.deliver(request)).await;
        match answered {
            Ok(Ok(_)) => PushOutcome::Delivered,
            Ok(Err(status)) => outcome_of_status(&status, SystemTime::now()),
            Err(_) => PushOutcome::Retry { after: None },
        }
    }

    fn request(
        &self,
        delivered: &Delivered,
        signing: Option<&Signing>,
    ) -> Result<Request<DeliverRequest>, String> {
        let expiration = crate::convert::expiration(
            delivered.delivery_id,
            &delivered.expiration,
            delivered.attempt,
        );
        let mut labels = PushLabels::of(delivered, expiration.delivery_id.clone());
        // Signed over the `expiration` field as encoded: what a receiver re-encodes.
        if signing.is_some() {
            labels.sign(signing, &prost::Message::encode_to_vec(&expiration));
        }
        let mut metadata = MetadataMap::new();
        let ascii = |value: String| {
            AsciiMetadataValue::try_from(value).map_err(|error| format!("metadata: {error}"))
        };
        metadata.insert("idempotency-key", ascii(labels.idempotency_key.clone())?);
        metadata.insert("tickd-delivery-id", ascii(labels.delivery_id)?);
        metadata.insert("tickd-attempt", AsciiMetadataValue::from(delivered.attempt));
        metadata.insert("tickd-namespace", ascii(labels.namespace)?);
        if let Some(signature) = labels.signature {
            metadata.insert("webhook-id", ascii(signature.id)?);
            metadata.insert("webhook-timestamp", ascii(signature.timestamp)?);
            metadata.insert("webhook-signature", ascii(signature.signatures)?);
        }
        for (name, value) in delivered
            .expiration
            .trace
            .iter()
            .flat_map(|trace| trace.headers())
        {
            metadata.insert(name, ascii(value.to_owned())?);
        }
        if let Some(authorization) = self.security.authorization() {
            let authorization = AsciiMetadataValue::try_from(authorization.as_bytes())
                .map_err(|error| format!("metadata: {error}"))?;
            metadata.insert("authorization", authorization);
        }
        let mut request = Request::new(DeliverRequest {
            expiration: Some(expiration),
            idempotency_key: labels.idempotency_key,
            namespace: delivered.expiration.namespace.to_string(),
        });
        *request.metadata_mut() = metadata;
        // The sink sees the deadline (`grpc-timeout`).
        request.set_timeout(self.timeout);
        Ok(request)
    }
}

/// What a status answered to Deliver (or made by the client) means for the attempt.
pub(crate) fn outcome_of_status(status: &Status, now: SystemTime) -> PushOutcome {
    // Made here, not by the sink: no connection could be made, so nothing was sent.
    if let Some(reason) = connection_failure(status) {
        return PushOutcome::Unreachable { reason };
    }
    match status.code() {
        Code::Ok | Code::AlreadyExists => PushOutcome::Delivered,
        Code::ResourceExhausted => PushOutcome::SlowDown {
            after: retry_after(&status.metadata().clone().into_headers(), now),
        },
        Code::Unavailable => match retry_after(&status.metadata().clone().into_headers(), now) {
            Some(after) => PushOutcome::SlowDown { after: Some(after) },
            None => PushOutcome::Retry { after: None },
        },
        Code::Aborted
        | Code::DeadlineExceeded
        | Code::Internal
        | Code::Unknown
        | Code::Cancelled
        | Code::DataLoss => PushOutcome::Retry {
            after: retry_after(&status.metadata().clone().into_headers(), now),
        },
        // INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND, PERMISSION_DENIED,
        // UNAUTHENTICATED, UNIMPLEMENTED, OUT_OF_RANGE: refused. The code's number stands
        // for the status in the log.
        code => PushOutcome::Rejected {
            status: code as u16,
        },
    }
}

/// Why the channel could not connect, if that is what `status` says (tonic reports it as
/// UNAVAILABLE with a [`ConnectError`] among its sources).
fn connection_failure(status: &Status) -> Option<String> {
    let source = status.source()?;
    let failed = std::iter::successors(Some(source), |&error| error.source())
        .find_map(|error| error.downcast_ref::<ConnectError>())?;
    Some(match sink_refusal(failed) {
        Some(refused) => refused.to_string(),
        None => with_causes(failed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(code: Code) -> PushOutcome {
        outcome_of_status(&Status::new(code, "scripted"), SystemTime::now())
    }

    #[test]
    fn statuses_settle_an_attempt() {
        assert_eq!(outcome(Code::AlreadyExists), PushOutcome::Delivered);
        assert_eq!(
            outcome(Code::ResourceExhausted),
            PushOutcome::SlowDown { after: None },
            "the sink's load: no attempt"
        );
        for code in [
            Code::Unavailable,
            Code::Aborted,
            Code::DeadlineExceeded,
            Code::Internal,
            Code::Unknown,
        ] {
            assert_eq!(
                outcome(code),
                PushOutcome::Retry { after: None },
                "{code:?}"
            );
        }
        for (code, number) in [
            (Code::InvalidArgument, 3),
            (Code::NotFound, 5),
            (Code::PermissionDenied, 7),
            (Code::FailedPrecondition, 9),
            (Code::Unimplemented, 12),
            (Code::Unauthenticated, 16),
        ] {
            assert_eq!(outcome(code), PushOutcome::Rejected { status: number });
        }
    }

    #[test]
    fn a_retry_after_in_the_trailers_is_honoured() {
        let mut status = Status::unavailable("busy");
        status
            .metadata_mut()
            .insert("retry-after", AsciiMetadataValue::from_static("2"));
        assert_eq!(
            outcome_of_status(&status, SystemTime::now()),
            PushOutcome::SlowDown {
                after: Some(Duration::from_secs(2))
            }
        );
    }

    #[test]
    fn a_connection_that_failed_is_unreachable_not_an_attempt() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let status = Status::from_error(Box::new(ConnectError(Box::new(refused))));
        assert_eq!(status.code(), Code::Unavailable);
        match outcome_of_status(&status, SystemTime::now()) {
            PushOutcome::Unreachable { reason } => assert!(reason.contains("refused"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }
}
