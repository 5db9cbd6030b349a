//! The tonic service: validates each request, checks the caller may use its namespace,
//! asks the backend, and turns the answer into the response. No timer logic lives here,
//! and nothing here knows which backend answers: [`TimersService`] holds one
//! [`Timers`](crate::domain::Timers) and one [`Expirations`](crate::domain::Expirations)
//! (see [`crate::domain`]). Refusals become statuses in [`status`].
//!
//! This file only routes: each RPC is one call into the file of its family, which holds
//! its whole story (its validation, its call into the backend, its answer):
//! [`registration`] (NewTimeout, NewTimeouts, Cancel, Reschedule), [`lookup`] (Get,
//! Pending), [`leases`] (Touch, KeepAlive), [`delivery`] (Subscribe, Ack) and [`redrive`]
//! (Redrive). What they share is in [`service`] (the service's state), [`convert`]
//! (limits, common fields and answers), [`auth`], [`status`] and [`streams`].
//!
//! The second service, `tickd.v1.Sinks` (push sinks set, read and removed at run time),
//! is [`sinks`], behind the same tokens.
//!
//! Each handler runs in a span named after its RPC, at debug level: free unless debug
//! logging is on, and then every event of the call says which call it belongs to.

pub(crate) mod auth;
pub(crate) mod codec;
mod delivery;
mod leases;
mod lookup;
mod redrive;
mod registration;
mod service;
mod sinks;
mod status;
pub(crate) mod streams;

use tonic::{Request, Response, Status, Streaming};
use tracing::instrument;

use crate::proto;
use service::BoxStream;
pub(crate) use service::TimersService;
pub(crate) use sinks::SinksService;

#[tonic::async_trait]
impl proto::timers_server::Timers for TimersService {
    #[instrument(level = "debug", name = "NewTimeout", skip_all)]
    async fn new_timeout(
        &self,
        request: Request<proto::NewTimeoutRequest>,
    ) -> Result<Response<proto::NewTimeoutResponse>, Status> {
        registration::new_timeout(self, request).await
    }

    #[instrument(level = "debug", name = "NewTimeouts", skip_all)]
    async fn new_timeouts(
        &self,
        request: Request<proto::NewTimeoutsRequest>,
    ) -> Result<Response<proto::NewTimeoutsResponse>, Status> {
        registration::new_timeouts(self, request).await
    }

    #[instrument(level = "debug", name = "Cancel", skip_all)]
    async fn cancel(
        &self,
        request: Request<proto::CancelRequest>,
    ) -> Result<Response<proto::CancelResponse>, Status> {
        registration::cancel(self, request).await
    }

    #[instrument(level = "debug", name = "Pending", skip_all)]
    async fn pending(
        &self,
        request: Request<proto::PendingRequest>,
    ) -> Result<Response<proto::PendingResponse>, Status> {
        lookup::pending(self, request).await
    }

    #[instrument(level = "debug", name = "Get", skip_all)]
    async fn get(
        &self,
        request: Request<proto::GetRequest>,
    ) -> Result<Response<proto::GetResponse>, Status> {
        lookup::get(self, request).await
    }

    #[instrument(level = "debug", name = "Touch", skip_all)]
    async fn touch(
        &self,
        request: Request<proto::TouchRequest>,
    ) -> Result<Response<proto::TouchResponse>, Status> {
        leases::touch(self, request).await
    }

    type KeepAliveStream = BoxStream<proto::KeepAliveResponse>;

    #[instrument(level = "debug", name = "KeepAlive", skip_all)]
    async fn keep_alive(
        &self,
        request: Request<Streaming<proto::KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        leases::keep_alive(self, request).await
    }

    type SubscribeStream = BoxStream<proto::SubscribeResponse>;

    #[instrument(level = "debug", name = "Subscribe", skip_all)]
    async fn subscribe(
        &self,
        request: Request<proto::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        delivery::subscribe(self, request).await
    }

    #[instrument(level = "debug", name = "Ack", skip_all)]
    async fn ack(
        &self,
        request: Request<proto::AckRequest>,
    ) -> Result<Response<proto::AckResponse>, Status> {
        delivery::ack(self, request).await
    }

    #[instrument(level = "debug", name = "Reschedule", skip_all)]
    async fn reschedule(
        &self,
        request: Request<proto::RescheduleRequest>,
    ) -> Result<Response<proto::RescheduleResponse>, Status> {
        registration::reschedule(self, request).await
    }

    #[instrument(level = "debug", name = "Redrive", skip_all)]
    async fn redrive(
        &self,
        request: Request<proto::RedriveRequest>,
    ) -> Result<Response<proto::RedriveResponse>, Status> {
        redrive::redrive(self, request).await
    }
}
