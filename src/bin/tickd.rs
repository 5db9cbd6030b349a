//! The tickd daemon: `tickd` alone starts a server with the embedded defaults.

use clap::Parser;
use tokio::net::{TcpListener, UnixListener};
use tracing::{error, info};

use tickd::config::{Config, LogFormat};
use tickd::server::Listeners;

/// mimalloc instead of glibc's malloc: the gRPC path allocates many small buffers from
/// many threads, where glibc's arenas cost about a third of the server's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let config = Config::parse();
    init_logging(config.log_format);
    match serve(config).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            error!(error = %message, "tickd failed");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TICKD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn serve(config: Config) -> Result<(), String> {
    let shutdown = shutdown_signal();
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|error| format!("binding --listen {}: {error}", config.listen))?;
    let unix_listener = match &config.unix_socket {
        Some(path) => Some(bind_unix(path, config.unix_socket_mode)?),
        None => None,
    };
    let metrics_listener = TcpListener::bind(config.metrics_listen)
        .await
        .map_err(|error| {
            format!(
                "binding --metrics-listen {}: {error}",
                config.metrics_listen
            )
        })?;
    info!(
        listen = %listener.local_addr().map_err(|error| error.to_string())?,
        unix_socket = ?config.unix_socket,
        metrics = %metrics_listener.local_addr().map_err(|error| error.to_string())?,
        tick = ?config.tick,
        "tickd serving"
    );
    let health_listener = match config.health_listen {
        Some(address) => Some(
            TcpListener::bind(address)
                .await
                .map_err(|error| format!("binding --health-listen {address}: {error}"))?,
        ),
        None => None,
    };
    let listeners = Listeners {
        grpc: listener,
        unix: unix_listener,
        metrics: Some(metrics_listener),
        health: health_listener,
    };
    let stopped = tickd::server::run(&config, listeners, shutdown)
        .await
        .map_err(|error| error.to_string())?;
    if let Some(path) = &config.unix_socket {
        let _ = std::fs::remove_file(path);
    }
    info!(pending_timers = stopped.pending_timers, "bye");
    Ok(())
}

/// A stale socket file from a previous run would make bind fail; it is replaced. The file
/// mode decides who may connect.
fn bind_unix(path: &std::path::Path, mode: u32) -> Result<UnixListener, String> {
    use std::os::unix::fs::PermissionsExt;
    if path.exists() {
        std::fs::remove_file(path)
            .map_err(|error| format!("removing stale socket {}: {error}", path.display()))?;
    }
    let listener = UnixListener::bind(path)
        .map_err(|error| format!("binding --unix-socket {}: {error}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|error| format!("setting the mode of {}: {error}", path.display()))?;
    Ok(listener)
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed at the call, not when the
/// server first polls the future: the server may answer its first calls before that, and a
/// SIGTERM sent then would otherwise kill tickd instead of stopping it gracefully.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    let mut interrupt = signal(SignalKind::interrupt()).expect("installing the SIGINT handler");
    async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    }
}
