//! A gRPC sink written for the tests: a tonic server implementing `tickd.v1.Sink` on
//! loopback (plain, or TLS with a test certificate) that records every Deliver call tickd
//! makes and answers as the test's script says.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tickd::proto::sink_server::{Sink, SinkServer};
use tickd::proto::{DeliverRequest, DeliverResponse, Expiration};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Code, Request, Response, Status};

use super::rpc::PATIENCE;

/// One Deliver call as the sink received it: its metadata and its message.
#[derive(Clone, Debug)]
pub(crate) struct GrpcPush {
    pub key: String,
    pub delivery_id: String,
    pub attempt: u32,
    pub namespace: String,
    pub authorization: Option<String>,
    pub request: DeliverRequest,
}

impl GrpcPush {
    pub(crate) fn expiration(&self) -> &Expiration {
        self.request.expiration.as_ref().expect("an expiration")
    }
}

/// The answer to a call: OK, or a status code. Called with the call and how many calls for
/// its expiration (its idempotency key) came before it.
pub(crate) type GrpcScript = Arc<dyn Fn(&GrpcPush, usize) -> Code + Send + Sync>;

pub(crate) struct GrpcSink {
    pub addr: SocketAddr,
    pushes: Arc<Mutex<Vec<GrpcPush>>>,
    pushed: Arc<Notify>,
    server: JoinHandle<()>,
}

#[derive(Clone)]
struct Recorder {
    pushes: Arc<Mutex<Vec<GrpcPush>>>,
    pushed: Arc<Notify>,
    script: GrpcScript,
}

#[tonic::async_trait]
impl Sink for Recorder {
    async fn deliver(
        &self,
        request: Request<DeliverRequest>,
    ) -> Result<Response<DeliverResponse>, Status> {
        let metadata = |name: &str| {
            request
                .metadata()
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
        };
        let push = GrpcPush {
            key: metadata("idempotency-key").unwrap_or_default(),
            delivery_id: metadata("tickd-delivery-id").unwrap_or_default(),
            attempt: metadata("tickd-attempt")
                .and_then(|attempt| attempt.parse().ok())
                .unwrap_or_default(),
            namespace: metadata("tickd-namespace").unwrap_or_default(),
            authorization: metadata("authorization"),
            request: request.into_inner(),
        };
        let code = {
            let mut pushes = self.pushes.lock().unwrap();
            let before = pushes
                .iter()
                .filter(|earlier| earlier.key == push.key)
                .count();
            let code = (self.script)(&push, before);
            pushes.push(push);
            code
        };
        self.pushed.notify_waiters();
        match code {
            Code::Ok => Ok(Response::new(DeliverResponse {})),
            code => Err(Status::new(code, "scripted")),
        }
    }
}

impl GrpcSink {
    /// Plain gRPC (`grpc://`), or TLS (`grpcs://`) with `identity` (certificate, key PEM).
    pub(crate) async fn start(script: GrpcScript, identity: Option<(&str, &str)>) -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap(), script, identity).await
    }

    /// On a given address: a sink brought up where tickd expects it.
    pub(crate) async fn start_on(
        addr: SocketAddr,
        script: GrpcScript,
        identity: Option<(&str, &str)>,
    ) -> Self {
        let listener = TcpListener::bind(addr).await.expect("bind the test sink");
        let addr = listener.local_addr().unwrap();
        let pushes = Arc::new(Mutex::new(Vec::new()));
        let pushed = Arc::new(Notify::new());
        let recorder = Recorder {
            pushes: pushes.clone(),
            pushed: pushed.clone(),
            script,
        };
        let mut builder = tonic::transport::Server::builder();
        if let Some((cert, key)) = identity {
            builder = builder
                .tls_config(
                    tonic::transport::ServerTlsConfig::new()
                        .identity(tonic::transport::Identity::from_pem(cert, key)),
                )
                .expect("the test sink's TLS");
        }
        let router = builder.add_service(SinkServer::new(recorder));
        let server = tokio::spawn(async move {
            let _ = router
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await;
        });
        GrpcSink {
            addr,
            pushes,
            pushed,
            server,
        }
    }

    pub(crate) fn pushes(&self) -> Vec<GrpcPush> {
        self.pushes.lock().unwrap().clone()
    }

    /// Waits until the calls received satisfy `condition`, checked at each call (at most
    /// [`PATIENCE`] twice, then fails with `what` and the calls).
    pub(crate) async fn wait_for(&self, what: &str, condition: impl Fn(&[GrpcPush]) -> bool) {
        let deadline = tokio::time::Instant::now() + PATIENCE * 2;
        loop {
            let pushed = self.pushed.notified();
            tokio::pin!(pushed);
            pushed.as_mut().enable();
            if condition(&self.pushes.lock().unwrap()) {
                return;
            }
            if tokio::time::timeout_at(deadline, pushed).await.is_err() {
                let pushes = self.pushes();
                panic!(
                    "the sink never saw {what}; it received {} calls: {:#?}",
                    pushes.len(),
                    pushes.iter().rev().take(10).collect::<Vec<_>>()
                );
            }
        }
    }
}

impl Drop for GrpcSink {
    fn drop(&mut self) {
        self.server.abort();
    }
}
