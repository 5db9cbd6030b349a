//! A real tickd server on 127.0.0.1:0 (and optionally a Unix socket) for the integration
//! tests: [`TestServer`], and [`config`] to start it with changed settings.

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

use tickd::config::Config;
use tickd::proto::timers_client::TimersClient;
use tickd::server::Stopped;

pub(crate) struct TestServer {
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// Plaintext grpc.health.v1 only (`--health-listen`).
    pub health_addr: SocketAddr,
    pub unix_socket: Option<PathBuf>,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<Stopped>,
    _dir: tempfile::TempDir,
}

/// The embedded defaults, changed by `adjust`.
pub(crate) fn config(adjust: impl FnOnce(&mut Config)) -> Config {
    let mut config = Config::defaults();
    adjust(&mut config);
    config
}

impl TestServer {
    pub(crate) async fn start() -> Self {
        Self::start_with(Config::defaults()).await
    }

    pub(crate) async fn start_with(config: Config) -> Self {
        Self::start_inner(config, false).await
    }

    /// A server whose `namespace` pushes to the sink at `url` (`--sink NAMESPACE=URL`),
    /// otherwise the embedded defaults changed by `adjust`.
    pub(crate) async fn pushing_to(
        namespace: &str,
        url: &str,
        adjust: impl FnOnce(&mut Config),
    ) -> Self {
        Self::start_with(config(|config| {
            config.sinks = vec![format!("{namespace}={url}").parse().expect("a valid sink")];
            adjust(config);
        }))
        .await
    }

    pub(crate) async fn start_with_unix_socket(config: Config) -> Self {
        Self::start_inner(config, true).await
    }

    async fn start_inner(mut config: Config, with_unix: bool) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        if config.data_dir == Config::defaults().data_dir {
            config.data_dir = dir.path().join("data");
        }
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let unix_socket = with_unix.then(|| dir.path().join("tickd.sock"));
        let unix_listener = unix_socket
            .as_ref()
            .map(|path| UnixListener::bind(path).expect("bind unix socket"));
        let metrics_listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind metrics");
        let metrics_addr = metrics_listener.local_addr().expect("metrics addr");
        let health_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind health");
        let health_addr = health_listener.local_addr().expect("health addr");
        let listeners = tickd::server::Listeners {
            grpc: listener,
            unix: unix_listener,
            metrics: Some(metrics_listener),
            health: Some(health_listener),
        };
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            tickd::server::run(&config, listeners, async {
                let _ = stop.await;
            })
            .await
            .expect("server run")
        });
        Self {
            addr,
            metrics_addr,
            health_addr,
            unix_socket,
            shutdown: Some(shutdown),
            task,
            _dir: dir,
        }
    }

    pub(crate) async fn channel(&self) -> Channel {
        Endpoint::from_shared(format!("http://{}", self.addr))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect")
    }

    pub(crate) async fn client(&self) -> TimersClient<Channel> {
        TimersClient::new(self.channel().await)
    }

    /// Triggers shutdown and waits for the server to finish draining.
    pub(crate) async fn stop(mut self) -> Stopped {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        (&mut self.task).await.expect("server task")
    }
}
