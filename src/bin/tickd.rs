//! The tickd daemon: `tickd` alone starts a server with the embedded defaults;
//! `tickd check DIR` reads a data directory without serving; `tickd --version` names the
//! release and the time zone database compiled in.

use std::path::Path;
use std::process::ExitCode;

use std::sync::LazyLock;

use clap::{CommandFactory, FromArgMatches};
use tokio::net::{TcpListener, UnixListener};
use tracing::{error, info};

use tickd::clock::{Clock, SystemClock};
use tickd::config::{Command, Config, LogFormat};
use tickd::local::table::{TableConfig, TimerTable};
use tickd::metrics::Metrics;
use tickd::server::Listeners;
use tickd::telemetry::Export;

/// mimalloc instead of glibc's malloc: the gRPC path allocates many small buffers from
/// many threads, where glibc's arenas cost about a third of the server's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What `--version` and `-V` print after the name: `0.1.0 (tz database 2025b)`. Cron
/// schedules are read with the compiled-in database, so its release is part of the version.
static VERSION: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{} (tz database {})",
        env!("CARGO_PKG_VERSION"),
        tickd::cron::time_zone_database_version()
    )
});

/// The command line, with the version text above.
fn parse_config() -> Config {
    let matches = Config::command().version(VERSION.as_str()).get_matches();
    Config::from_arg_matches(&matches).unwrap_or_else(|error| error.exit())
}

#[tokio::main]
async fn main() -> ExitCode {
    let config = parse_config();
    if let Some(Command::Check { dir }) = &config.command {
        init_logging(config.log_format, None);
        return check(&config, dir);
    }
    let export = match Export::start(config.otlp_endpoint.as_deref()) {
        Ok(export) => export,
        Err(message) => {
            init_logging(config.log_format, None);
            error!(error = %message, "tickd failed");
            return ExitCode::FAILURE;
        }
    };
    init_logging(config.log_format, export.as_ref());
    if export.is_some() {
        info!("exporting traces over OTLP/gRPC");
    }
    tickd::server::raise_open_file_limit();
    let served = serve(config).await;
    if let Some(export) = export {
        // Flushing waits on the exporter, which runs on this runtime: off its threads.
        let _ = tokio::task::spawn_blocking(move || export.shutdown()).await;
    }
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            error!(error = %message, "tickd failed");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat, export: Option<&Export>) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{Layer, Registry};
    // The NATS client logs each connection event at info; tickd says itself when a sink
    // is unreachable, so by default only its warnings show.
    let filter = tracing_subscriber::EnvFilter::try_from_env("TICKD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,async_nats=warn"));
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(colour_logs())
        // A log line that cannot be written (its reader went away, as when a supervisor
        // closes the pipe before stopping tickd) is dropped: the default reports it with
        // `eprintln!`, which panics when standard error is closed too, and the drain never ends
        // with its status 0.
        .log_internal_errors(false);
    let lines: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text => lines.boxed(),
        LogFormat::Json => lines.json().boxed(),
    };
    // The filter applies to the log lines only: the registering call's span is exported
    // whatever TICKD_LOG says.
    tracing_subscriber::registry()
        .with(lines.with_filter(filter))
        .with(export.map(|export| export.layer()))
        .init();
}

/// Colours only for a person watching: the log goes to standard output, and escape codes
/// in a file or a pipe (a log collector) are noise. `NO_COLOR` (any value but empty, see
/// no-color.org) turns them off on a terminal too.
fn colour_logs() -> bool {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
    std::io::stdout().is_terminal() && !no_color
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

/// `tickd check DIR`: replays the directory into a timer table, as start-up would, and
/// prints one line per file read, the first damage if any, and a summary line. Exit codes:
/// 0 nothing that stops start-up (a torn final append is reported: start-up drops it), 1
/// damage, 2 the directory could not be read.
fn check(config: &Config, dir: &Path) -> ExitCode {
    let mut table = TimerTable::new(TableConfig::from_config(config), Metrics::new());
    let now = SystemClock::new().now();
    let scan = match tickd::local::store::scan::scan(dir, |record| table.replay(record, now)) {
        Ok(scan) => scan,
        Err(error) => {
            eprintln!("check dir={} error={:?}", dir.display(), error.to_string());
            return ExitCode::from(2);
        }
    };
    for file in &scan.files {
        let format = file
            .format
            .map_or("unknown".into(), |f| f.version().to_string());
        println!(
            "file path={} format={format} bytes={} records={}",
            file.path.display(),
            file.bytes,
            file.records
        );
    }
    for path in &scan.unread {
        println!("unread path={}", path.display());
    }
    let damaged = scan.stop.as_ref().is_some_and(|stop| !stop.torn);
    if let Some(stop) = &scan.stop {
        let what = if stop.torn { "torn" } else { "damage" };
        println!(
            "{what} path={} offset={} bytes_after={} reason={:?}",
            stop.path.display(),
            stop.offset,
            stop.bytes_after,
            stop.damage.to_string()
        );
    }
    println!(
        "check dir={} files={} records={} live_timers={} unsettled={} result={}",
        dir.display(),
        scan.files.len() + scan.unread.len(),
        scan.records,
        table.len(),
        scan.unsettled(),
        match (&scan.stop, damaged) {
            (_, true) => "damaged",
            (Some(_), false) => "torn-tail",
            (None, false) => "ok",
        }
    );
    if damaged {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
