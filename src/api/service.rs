//! The state every handler works with: [`TimersService`] holds the two backend traits
//! ([`Timers`], [`Expirations`]), the request and stream limits, and the memory budget,
//! with the few steps most calls share (holding a write against the budget, checking a
//! timer reference or a namespace). The handlers themselves are in the family files.

use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_stream::Stream;
use tonic::{Request, Status};

use super::auth::Grant;
use super::streams::{ConnectionStreams, StreamLimits, StreamLimitsConfig};
use crate::budget::{MemoryBudget, MemoryReservation, Refusal};
use crate::convert::Limits;
use crate::domain::{Expirations, TimerError, TimerRef, Timers};
use crate::metrics::Metrics;
use crate::proto;

#[derive(Clone)]
pub(crate) struct TimersService {
    pub(super) timers: Arc<dyn Timers>,
    pub(super) expirations: Arc<dyn Expirations>,
    pub(super) limits: Limits,
    pub(super) streams: StreamLimits,
    pub(super) shutdown: watch::Receiver<bool>,
    /// Write requests are held against it while they are served (see
    /// [`Self::hold_request`]).
    memory: Arc<MemoryBudget>,
    metrics: Arc<Metrics>,
}

impl TimersService {
    pub(crate) fn new(
        timers: Arc<dyn Timers>,
        expirations: Arc<dyn Expirations>,
        limits: Limits,
        streams: StreamLimitsConfig,
        shutdown: watch::Receiver<bool>,
        memory: Arc<MemoryBudget>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            timers,
            expirations,
            limits,
            streams: StreamLimits::new(streams),
            shutdown,
            memory,
            metrics,
        }
    }

    /// Holds a request that brings new bytes (a registration, a new payload) against the
    /// memory budget until it is answered: the write path's buffers in flight (the decoded
    /// request, its payloads on their way to the table and the log) count with what is
    /// held, so many large requests at once are refused instead of adding up past the
    /// budget. Refused, the request goes no further.
    pub(super) fn hold_request<T: prost::Message>(
        &self,
        request: &Request<T>,
    ) -> Result<MemoryReservation, TimerError> {
        let bytes = request.get_ref().encoded_len() as u64;
        self.memory.try_reserve(bytes).map_err(|exhausted| {
            self.metrics.budgets.refused(Refusal::Memory);
            TimerError::from(exhausted)
        })
    }

    /// Validates a timer reference and checks the caller may use its namespace.
    pub(super) fn authorized_ref(
        &self,
        grant: &Grant,
        reference: Option<proto::TimerRef>,
    ) -> Result<TimerRef, TimerError> {
        let timer = self.limits.timer_ref(reference)?;
        grant.check(Some(&timer.namespace))?;
        Ok(timer)
    }

    /// Validates a namespace (empty means the default one) and checks the caller may use it.
    pub(super) fn authorized_namespace(
        &self,
        grant: &Grant,
        namespace: &str,
    ) -> Result<String, TimerError> {
        let namespace = self.limits.namespace(namespace)?;
        grant.check(Some(&namespace))?;
        Ok(namespace)
    }
}

/// The stream counters of the connection a request came on (see `server::calls`).
pub(super) fn connection_streams<T>(request: &Request<T>) -> Option<&Arc<ConnectionStreams>> {
    request.extensions().get::<Arc<ConnectionStreams>>()
}

/// The response of a streaming RPC.
pub(super) type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;
