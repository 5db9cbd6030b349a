//! Redrive: dead expirations (listed by Pending with `include_dead`) are given to their
//! namespace's subscribers again, named by delivery id, or the oldest of the namespace
//! when none is named.

use tonic::{Request, Response, Status};

use super::auth::grant_of;
use super::service::TimersService;
use crate::convert;
use crate::domain::MAX_REDRIVE;
use crate::proto;

pub(super) async fn redrive(
    service: &TimersService,
    request: Request<proto::RedriveRequest>,
) -> Result<Response<proto::RedriveResponse>, Status> {
    let grant = grant_of(&request);
    let request = request.into_inner();
    let namespace = service.authorized_namespace(&grant, &request.namespace)?;
    if request.delivery_ids.len() > MAX_REDRIVE {
        return Err(Status::invalid_argument(format!(
            "delivery_ids: {} ids is over the {MAX_REDRIVE} one Redrive call takes; \
             send them in several calls",
            request.delivery_ids.len()
        )));
    }
    let (ids, mut not_dead) = convert::parse_delivery_ids(request.delivery_ids);
    // No ids at all: the oldest dead expirations of the namespace, up to MAX_REDRIVE.
    let named = (!ids.is_empty() || !not_dead.is_empty()).then_some(ids);
    let outcome = service.expirations.redrive(namespace, named).await?;
    not_dead.extend(outcome.not_dead.into_iter().map(convert::delivery_id));
    Ok(Response::new(proto::RedriveResponse {
        redriven: outcome.redriven,
        not_dead,
    }))
}
