//! Delivery: Subscribe, a namespace's stream of fired timers (as a subscriber that acks
//! them, or an observer that only watches), and Ack, which settles delivered ones by
//! delivery id. What a subscriber's options come to is decided in
//! [`SubscribeOptions`]'s rules, not here.

use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};

use super::auth::grant_of;
use super::service::{connection_streams, BoxStream, TimersService};
use super::streams::StreamKind;
use crate::convert;
use crate::domain::{zero_is_the_default, SubscribeOptions};
use crate::proto;
use crate::telemetry::{self, spans};

pub(super) async fn subscribe(
    service: &TimersService,
    request: Request<proto::SubscribeRequest>,
) -> Result<Response<BoxStream<proto::SubscribeResponse>>, Status> {
    let grant = grant_of(&request);
    let connection = connection_streams(&request).cloned();
    let request = request.into_inner();
    let namespace = service.authorized_namespace(&grant, &request.namespace)?;
    let ack_timeout = match &request.ack_timeout {
        Some(timeout) => zero_is_the_default(service.limits.duration("ack_timeout", timeout)?),
        None => None,
    };
    let options = SubscribeOptions {
        namespace,
        observer: request.mode == proto::subscribe_request::Mode::Observer as i32,
        ack_timeout,
        max_unacked: zero_is_the_default(request.max_unacked as usize),
        auto_ack: request.auto_ack,
    };
    let kind = match options.observer {
        true => StreamKind::Observer,
        false => StreamKind::Subscribe,
    };
    let permit = service.streams.acquire(kind, connection.as_ref())?;
    // An observer's copies are not deliveries: they make no spans.
    let delivering = !options.observer;
    let subscription = service.expirations.subscribe(options)?;
    let stream = subscription.map(move |delivered| {
        // The stream's place is given back when the stream ends.
        let _permit = &permit;
        if delivering {
            spans::delivery_sent(&delivered);
        }
        Ok(proto::SubscribeResponse {
            expiration: Some(convert::expiration(
                delivered.delivery_id,
                &delivered.expiration,
                delivered.attempt,
            )),
        })
    });
    Ok(Response::new(Box::pin(stream)))
}

pub(super) async fn ack(
    service: &TimersService,
    request: Request<proto::AckRequest>,
) -> Result<Response<proto::AckResponse>, Status> {
    let grant = grant_of(&request);
    let request = request.into_inner();
    let namespace = service.authorized_namespace(&grant, &request.namespace)?;
    let (delivery_ids, mut unknown) = convert::parse_delivery_ids(request.delivery_ids);
    let asked = telemetry::exporting().then(|| (namespace.clone(), delivery_ids.clone()));
    let outcome = service.expirations.ack(namespace, delivery_ids).await?;
    if let Some((namespace, asked)) = asked {
        let settled: Vec<u64> = asked
            .into_iter()
            .filter(|id| !outcome.unknown.contains(id))
            .collect();
        spans::acknowledged(&namespace, &settled);
    }
    unknown.extend(outcome.unknown.into_iter().map(convert::delivery_id));
    Ok(Response::new(proto::AckResponse {
        acknowledged: outcome.acknowledged,
        unknown,
    }))
}
