//! The connections a replica's parts run their statements on ([`Connections`]), each one
//! preparing a statement once ([`StoreClient`]), and when the database last answered any
//! of them ([`Answers`](super::answers::Answers)), which is what readiness follows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};
use tracing::info;

use super::answers::Answers;
use super::database::Database;
use super::error::ClusterError;

/// A few connections used in turn for single statements. tokio-postgres pipelines
/// statements on one connection, so concurrent calls share them without waiting for each
/// other's round trips. A connection found closed (the server restarted, a proxy dropped
/// it) is opened again on its next use, so no part of a replica is left without one.
#[derive(Clone)]
pub struct Connections {
    database: Arc<Database>,
    clients: Arc<Vec<tokio::sync::Mutex<Arc<StoreClient>>>>,
    next: Arc<AtomicUsize>,
}

impl Connections {
    pub async fn open(database: &Database, count: u32) -> Result<Self, ClusterError> {
        let mut clients = Vec::with_capacity(count as usize);
        for _ in 0..count.max(1) {
            let client = StoreClient::new(database.connect().await?, database);
            database.answers().now();
            clients.push(tokio::sync::Mutex::new(Arc::new(client)));
        }
        Ok(Self {
            database: Arc::new(database.clone()),
            clients: Arc::new(clients),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The next connection in turn, reconnected first if it was closed.
    pub(crate) async fn client(&self) -> Result<Arc<StoreClient>, ClusterError> {
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        let mut client = self.clients[turn % self.clients.len()].lock().await;
        if client.is_closed() {
            *client = Arc::new(StoreClient::new(
                self.database.connect().await?,
                &self.database,
            ));
            self.database.answers().now();
            info!("store connection reopened");
        }
        Ok(client.clone())
    }
}

/// One connection with the statements it has prepared, by their text.
///
/// A statement given as text to tokio-postgres is prepared on every call: one round trip
/// to parse it and describe its parameters before the one that runs it, and a fresh plan
/// each time. Preparing each text once per connection halves the round trips of every
/// statement a replica repeats (firing, claims, acks, registrations) and lets the server
/// reuse its plan. `query`, `query_one`, `query_opt` and `execute` take the text as
/// tokio-postgres' do; everything else is the [`Client`]'s own, through `Deref`.
///
/// With a plan lifetime ([`Database::with_generic_plans`]) a statement older than it is prepared
/// again, so that the server plans it again; dropping the old one closes it on the server.
///
/// Every answer to these four is recorded in the [`Answers`] of the database the
/// connection was opened from.
pub(crate) struct StoreClient {
    client: Client,
    prepared: std::sync::Mutex<HashMap<String, (Statement, Instant)>>,
    plan_lifetime: Option<Duration>,
    answers: Answers,
}

impl StoreClient {
    fn new(client: Client, database: &Database) -> Self {
        Self {
            client,
            prepared: std::sync::Mutex::default(),
            plan_lifetime: database.plan_lifetime(),
            answers: database.answers().clone(),
        }
    }

    /// `sql` prepared on this connection, once (or once per plan lifetime).
    async fn statement(&self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        if let Some((statement, prepared_at)) = self.lock().get(sql) {
            if !outlived(*prepared_at, self.plan_lifetime, Instant::now()) {
                return Ok(statement.clone());
            }
        }
        let statement = self.answers.record(self.client.prepare(sql).await)?;
        self.lock()
            .insert(sql.to_owned(), (statement.clone(), Instant::now()));
        Ok(statement)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Statement, Instant)>> {
        self.prepared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) async fn query(
        &self,
        sql: &str,
        parameters: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        self.answers
            .record(self.client.query(&statement, parameters).await)
    }

    pub(crate) async fn query_one(
        &self,
        sql: &str,
        parameters: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        self.answers
            .record(self.client.query_one(&statement, parameters).await)
    }

    pub(crate) async fn query_opt(
        &self,
        sql: &str,
        parameters: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        self.answers
            .record(self.client.query_opt(&statement, parameters).await)
    }

    pub(crate) async fn execute(
        &self,
        sql: &str,
        parameters: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        self.answers
            .record(self.client.execute(&statement, parameters).await)
    }
}

impl std::ops::Deref for StoreClient {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

/// Whether a statement prepared at `prepared_at` must be prepared again at `now`: never
/// without a plan lifetime.
fn outlived(prepared_at: Instant, plan_lifetime: Option<Duration>, now: Instant) -> bool {
    plan_lifetime.is_some_and(|lifetime| now.saturating_duration_since(prepared_at) >= lifetime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::database::GENERIC_PLAN_LIFETIME;

    #[test]
    fn a_statement_is_prepared_again_only_once_its_plan_lifetime_is_over() {
        let prepared_at = Instant::now();
        let later = |millis| prepared_at + Duration::from_millis(millis);
        assert!(!outlived(prepared_at, None, later(3_600_000)));
        let lifetime = Some(GENERIC_PLAN_LIFETIME);
        assert!(!outlived(prepared_at, lifetime, prepared_at));
        assert!(!outlived(prepared_at, lifetime, later(249)));
        assert!(outlived(prepared_at, lifetime, later(250)));
        // A clock reading from before the statement (another thread's) keeps it.
        assert!(!outlived(later(10), lifetime, prepared_at));
    }
}
