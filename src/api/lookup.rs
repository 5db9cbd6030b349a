//! Lookup: Get (one timer) and Pending (a page of a namespace's pending timers, or every
//! namespace's for a caller granted them all, with its dead expirations). Nothing here
//! changes a timer.

use tonic::{Request, Response, Status};

use super::auth::grant_of;
use super::service::TimersService;
use crate::convert;
use crate::domain::{PageToken, PendingQuery};
use crate::proto;

/// Pending answers stay under 4 MiB, the receive limit of most gRPC clients: timers are
/// listed up to this many bytes (payloads and fields), then dead expirations up to the
/// rest of the response budget.
const PENDING_TIMER_BYTES: usize = 3 * 1024 * 1024;
const PENDING_RESPONSE_BYTES: usize = 3 * 1024 * 1024 + 512 * 1024;

pub(super) async fn get(
    service: &TimersService,
    request: Request<proto::GetRequest>,
) -> Result<Response<proto::GetResponse>, Status> {
    let grant = grant_of(&request);
    let timer = service.authorized_ref(&grant, request.into_inner().timer)?;
    let view = service.timers.get(timer).await?;
    Ok(Response::new(proto::GetResponse {
        timer: Some(convert::timer(view)),
    }))
}

pub(super) async fn pending(
    service: &TimersService,
    request: Request<proto::PendingRequest>,
) -> Result<Response<proto::PendingResponse>, Status> {
    let grant = grant_of(&request);
    let request = request.into_inner();
    let namespace = match request.namespace.as_str() {
        "" => None,
        name => Some(service.limits.namespace(name)?),
    };
    grant.check(namespace.as_deref())?;
    let after = match request.page_token.as_str() {
        "" => None,
        token => Some(token.parse::<PageToken>()?),
    };
    let query = PendingQuery {
        namespace: namespace.clone(),
        page_size: (request.page_size as usize).min(service.limits.max_page_size),
        max_bytes: PENDING_TIMER_BYTES,
        after,
    };
    let page = service.timers.pending(query).await?;
    // With no namespace (a caller allowed every one), every namespace's dead.
    let dead = service.expirations.dead(namespace).await?;
    let timers: Vec<proto::Timer> = page.timers.into_iter().map(convert::timer).collect();
    let mut budget = PENDING_RESPONSE_BYTES.saturating_sub(
        timers
            .iter()
            .map(prost::Message::encoded_len)
            .sum::<usize>(),
    );
    let dead_expirations = if request.include_dead {
        dead.dead
            .iter()
            // The delivery id is what Redrive takes to name this dead expiration.
            .map(|dead| convert::expiration(dead.id, &dead.expiration, dead.attempts))
            .take_while(|expiration| {
                let size = prost::Message::encoded_len(expiration) + 8;
                budget.checked_sub(size).map(|rest| budget = rest).is_some()
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(Response::new(proto::PendingResponse {
        count: page.count,
        timers,
        next_page_token: page
            .next_page_token
            .map(|token| token.to_string())
            .unwrap_or_default(),
        dead_count: dead.count,
        dead_expirations,
    }))
}
