//! Which store answers the API: the local wheel worker (with its delivery task), or the
//! shared database of a replicated deployment. The API sends both the same commands and
//! gets the same answers; only these two enums know there are two.

use tonic::Status;

use super::{status, stopped};
use crate::cluster::commands::ClusterCommands;
use crate::cluster::delivery::{ClusterDeliveries, DeliveryStream};
use crate::delivery::{AckOutcome, DeadList, DeliveryHandle, SubscribeOptions};
use crate::worker::table::Command;
use crate::worker::{SendError, WorkerHandle};

/// Where timer commands go.
#[derive(Clone)]
pub enum Timers {
    Local(WorkerHandle<Command>),
    Replicated(ClusterCommands),
}

impl Timers {
    /// Never waits: a full queue is an error the API turns into load shedding.
    pub fn try_send(&self, command: Command) -> Result<(), SendError> {
        match self {
            Timers::Local(worker) => worker.try_send(command),
            Timers::Replicated(commands) => commands.try_send(command),
        }
    }
}

/// Where subscriptions and acknowledgements go.
#[derive(Clone)]
pub enum Deliveries {
    Local(DeliveryHandle),
    Replicated(ClusterDeliveries),
}

impl Deliveries {
    pub fn subscribe(&self, options: SubscribeOptions) -> Result<DeliveryStream, Status> {
        match self {
            Deliveries::Local(delivery) => delivery
                .subscribe(options)
                .map(|subscription| Box::pin(subscription) as DeliveryStream)
                .map_err(|_| stopped()),
            Deliveries::Replicated(deliveries) => deliveries.subscribe(options).map_err(status),
        }
    }

    pub async fn ack(
        &self,
        namespace: String,
        delivery_ids: Vec<u64>,
    ) -> Result<AckOutcome, Status> {
        match self {
            Deliveries::Local(delivery) => delivery
                .ack(namespace, delivery_ids)
                .await
                .map_err(|_| stopped()),
            Deliveries::Replicated(deliveries) => deliveries
                .ack(namespace, delivery_ids)
                .await
                .map_err(status),
        }
    }

    /// The dead expirations kept in a namespace, or (None) in every namespace. A bare
    /// name is accepted too, for callers that only ask about one.
    pub async fn dead(&self, namespace: impl Into<Option<String>>) -> Result<DeadList, Status> {
        let namespace = namespace.into();
        match self {
            Deliveries::Local(delivery) => delivery.dead(namespace).await.map_err(|_| stopped()),
            Deliveries::Replicated(deliveries) => deliveries.dead(namespace).await.map_err(status),
        }
    }
}
