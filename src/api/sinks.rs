//! The `tickd.v1.Sinks` service: a namespace's push sink set, read, listed, paused, resumed
//! and removed while tickd runs, and how each sink is doing. Each call names a namespace its token must
//! allow, like the Timers calls; the work is [`crate::sink::Sinks`]'s, which keeps the
//! sinks in the backend's store and starts and stops their pushers. A URL is never
//! answered with its credentials: `user:password@` comes back as `***@`.

use tonic::{Request, Response, Status};
use tracing::instrument;

use super::auth::grant_of;
use crate::convert::Limits;
use crate::proto;
use crate::sink::{Origin, Secrets, SinkRate, SinkState, SinkView, Sinks};

/// The service, over the running sinks.
#[derive(Clone)]
pub(crate) struct SinksService {
    sinks: Sinks,
    limits: Limits,
}

impl SinksService {
    pub(crate) fn new(sinks: Sinks, limits: Limits) -> Self {
        Self { sinks, limits }
    }

    /// The namespace named (checked as every call's is), if the caller's token allows it.
    fn namespace<T>(&self, request: &Request<T>, namespace: &str) -> Result<String, Status> {
        let namespace = self.limits.namespace(namespace)?;
        grant_of(request).check(Some(&namespace))?;
        Ok(namespace)
    }
}

#[tonic::async_trait]
impl proto::sinks_server::Sinks for SinksService {
    #[instrument(level = "debug", name = "SetSink", skip_all)]
    async fn set_sink(
        &self,
        request: Request<proto::SetSinkRequest>,
    ) -> Result<Response<proto::SetSinkResponse>, Status> {
        let namespace = self.namespace(&request, &request.get_ref().namespace)?;
        let proto::SetSinkRequest {
            url,
            rate,
            secrets,
            clear_secrets,
            ..
        } = request.into_inner();
        if url.is_empty() {
            return Err(Status::invalid_argument("url: give the sink's URL"));
        }
        if clear_secrets && !secrets.is_empty() {
            return Err(Status::invalid_argument(
                "clear_secrets: give secrets or clear them, not both",
            ));
        }
        let secrets = match clear_secrets {
            true => Secrets::Clear,
            false if secrets.is_empty() => Secrets::Keep,
            false => Secrets::Given(secrets),
        };
        let rate = match rate.as_str() {
            "" => None,
            rate => Some(
                rate.parse::<SinkRate>()
                    .map_err(|why| Status::invalid_argument(format!("rate: {why}")))?,
            ),
        };
        let (sink, changed) = self.sinks.set(namespace, url, rate, secrets).await?;
        Ok(Response::new(proto::SetSinkResponse {
            sink: Some(sink_message(sink)),
            changed,
        }))
    }

    #[instrument(level = "debug", name = "GetSink", skip_all)]
    async fn get_sink(
        &self,
        request: Request<proto::GetSinkRequest>,
    ) -> Result<Response<proto::GetSinkResponse>, Status> {
        let namespace = self.namespace(&request, &request.get_ref().namespace)?;
        let sink = self.sinks.get(&namespace).await?;
        Ok(Response::new(proto::GetSinkResponse {
            sink: Some(sink_message(sink)),
        }))
    }

    #[instrument(level = "debug", name = "RemoveSink", skip_all)]
    async fn remove_sink(
        &self,
        request: Request<proto::RemoveSinkRequest>,
    ) -> Result<Response<proto::RemoveSinkResponse>, Status> {
        let namespace = self.namespace(&request, &request.get_ref().namespace)?;
        self.sinks.remove(&namespace).await?;
        Ok(Response::new(proto::RemoveSinkResponse {}))
    }

    #[instrument(level = "debug", name = "PauseSink", skip_all)]
    async fn pause_sink(
        &self,
        request: Request<proto::PauseSinkRequest>,
    ) -> Result<Response<proto::PauseSinkResponse>, Status> {
        let namespace = self.namespace(&request, &request.get_ref().namespace)?;
        let (sink, changed) = self.sinks.set_paused(&namespace, true).await?;
        Ok(Response::new(proto::PauseSinkResponse {
            sink: Some(sink_message(sink)),
            changed,
        }))
    }

    #[instrument(level = "debug", name = "ResumeSink", skip_all)]
    async fn resume_sink(
        &self,
        request: Request<proto::ResumeSinkRequest>,
    ) -> Result<Response<proto::ResumeSinkResponse>, Status> {
        let namespace = self.namespace(&request, &request.get_ref().namespace)?;
        let (sink, changed) = self.sinks.set_paused(&namespace, false).await?;
        Ok(Response::new(proto::ResumeSinkResponse {
            sink: Some(sink_message(sink)),
            changed,
        }))
    }

    #[instrument(level = "debug", name = "ListSinks", skip_all)]
    async fn list_sinks(
        &self,
        request: Request<proto::ListSinksRequest>,
    ) -> Result<Response<proto::ListSinksResponse>, Status> {
        let grant = grant_of(&request);
        let sinks = self.sinks.list(|namespace| grant.allows(namespace)).await?;
        Ok(Response::new(proto::ListSinksResponse {
            sinks: sinks.into_iter().map(sink_message).collect(),
        }))
    }

    #[instrument(level = "debug", name = "SinkStatus", skip_all)]
    async fn sink_status(
        &self,
        request: Request<proto::SinkStatusRequest>,
    ) -> Result<Response<proto::SinkStatusResponse>, Status> {
        let grant = grant_of(&request);
        let asked = request.get_ref();
        let sinks = if asked.all {
            if !asked.namespace.is_empty() {
                return Err(Status::invalid_argument(
                    "namespace: give a namespace or `all`, not both",
                ));
            }
            // Every sink the token allows; a token allowing none sees none.
            self.sinks.status(|namespace| grant.allows(namespace)).await
        } else {
            let namespace = self.namespace(&request, &asked.namespace)?;
            let sinks = self.sinks.status(|shown| shown == namespace).await;
            if sinks.is_empty() {
                return Err(Status::not_found(format!(
                    "namespace {namespace:?} has no sink running here"
                )));
            }
            sinks
        };
        Ok(Response::new(proto::SinkStatusResponse {
            sinks: sinks.into_iter().map(state_message).collect(),
        }))
    }
}

fn sink_message(sink: SinkView) -> proto::SinkView {
    proto::SinkView {
        namespace: sink.namespace,
        url: sink.url,
        origin: match sink.origin {
            Origin::Flag => proto::SinkOrigin::Flag,
            Origin::Api => proto::SinkOrigin::Api,
        } as i32,
        paused: sink.paused,
        rate: sink.rate.map(|rate| rate.to_string()).unwrap_or_default(),
        signed: sink.signed,
    }
}

fn state_message(state: SinkState) -> proto::SinkState {
    proto::SinkState {
        sink: Some(sink_message(state.sink)),
        circuit: match state.circuit {
            0 => proto::SinkCircuit::Closed,
            1 => proto::SinkCircuit::Open,
            _ => proto::SinkCircuit::HalfOpen,
        } as i32,
        in_flight: state.in_flight,
        delivered: state.delivered,
        retry: state.retry,
        rejected: state.rejected,
        unreachable: state.unreachable,
        last_error: state.last_error.unwrap_or_default(),
        slowed: state.slowed_pushes,
        waiting: state.waiting,
        slowed_to: state.slowed.unwrap_or_default(),
    }
}
