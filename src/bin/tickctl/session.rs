//! What every subcommand runs with: the connected gRPC clients and the global options
//! (`--namespace`, `--output`, `--timeout`), plus the deadline rules for unary calls and for
//! opening streams.

use std::future::Future;
use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_client::HealthClient;

use crate::connection::{connect, BearerTokenInterceptor, Connection};
use crate::failure::Failure;
use crate::values::Output;
use tickd::proto::sinks_client::SinksClient;
use tickd::proto::timers_client::TimersClient;

type TimersApi = TimersClient<InterceptedService<Channel, BearerTokenInterceptor>>;
type SinksApi = SinksClient<InterceptedService<Channel, BearerTokenInterceptor>>;
type HealthApi = HealthClient<InterceptedService<Channel, BearerTokenInterceptor>>;

/// A connection to tickd and the global options; subcommands borrow it.
pub(crate) struct Session {
    channel: Channel,
    bearer_token: BearerTokenInterceptor,
    namespace: String,
    output: Output,
    timeout: Duration,
}

impl Session {
    /// Reads the token first, so a bad `--token-file` is a usage error (exit 2) even when
    /// tickd is down, then connects.
    pub(crate) async fn connect(
        connection: &Connection,
        namespace: String,
        output: Output,
    ) -> Result<Self, Failure> {
        let bearer_token = BearerTokenInterceptor::from_flags(connection)?;
        let channel = connect(connection).await?;
        Ok(Session {
            channel,
            bearer_token,
            namespace,
            output,
            timeout: connection.timeout,
        })
    }

    /// A client of the Timers service; cheap, as it shares the session's channel.
    pub(crate) fn timers_api(&self) -> TimersApi {
        TimersClient::with_interceptor(self.channel.clone(), self.bearer_token.clone())
    }

    /// A client of the Sinks service on the same channel.
    pub(crate) fn sinks_api(&self) -> SinksApi {
        SinksClient::with_interceptor(self.channel.clone(), self.bearer_token.clone())
    }

    /// A client of the standard gRPC health service on the same channel.
    pub(crate) fn health_api(&self) -> HealthApi {
        HealthClient::with_interceptor(self.channel.clone(), self.bearer_token.clone())
    }

    /// `--namespace`; empty for the default namespace.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `--namespace` for people: the empty default namespace needs a visible name.
    pub(crate) fn namespace_shown(&self) -> &str {
        if self.namespace.is_empty() {
            "(default)"
        } else {
            &self.namespace
        }
    }

    pub(crate) fn wants_json(&self) -> bool {
        self.output == Output::Json
    }

    /// A unary request carrying `--timeout` as its gRPC deadline, so the server gives up too.
    pub(crate) fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.set_timeout(self.timeout);
        request
    }

    /// Awaits a unary call, enforcing the deadline here as well: a server that never answers
    /// (or a stalled connection) still ends with DEADLINE_EXCEEDED.
    pub(crate) async fn unary<T>(
        &self,
        call: impl Future<Output = Result<Response<T>, Status>>,
    ) -> Result<T, Failure> {
        self.within_timeout(call, || {
            Status::deadline_exceeded(format!(
                "no answer within --timeout {}",
                humantime::format_duration(self.timeout)
            ))
        })
        .await
    }

    /// Awaits the opening of a streaming call (its response headers) within `--timeout`; the
    /// stream itself then runs for as long as the command does.
    pub(crate) async fn open_stream<T>(
        &self,
        stream_name: &str,
        call: impl Future<Output = Result<Response<T>, Status>>,
    ) -> Result<T, Failure> {
        self.within_timeout(call, || {
            Status::deadline_exceeded(format!("{stream_name} stream did not open"))
        })
        .await
    }

    async fn within_timeout<T>(
        &self,
        call: impl Future<Output = Result<Response<T>, Status>>,
        timed_out: impl FnOnce() -> Status,
    ) -> Result<T, Failure> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(answer) => Ok(answer?.into_inner()),
            Err(_) => Err(Failure::Status(timed_out())),
        }
    }
}
