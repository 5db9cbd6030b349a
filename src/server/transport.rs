//! The transport every listener shares: HTTP/2 settings, and the file descriptors
//! connections may take (TLS, on the TCP listener only, is [`super::tls`]'s).

use tonic::transport::Server;
use tracing::{info, warn};

use crate::config::Config;

/// HTTP/2 as every listener serves it.
///
/// Flow-control windows are set with the h2 crate's guard against floods of small DATA
/// frames in mind: h2 ends a connection (GOAWAY ENHANCE_YOUR_CALM) once the small frames it
/// holds unread cost more than half the connection window, counting 256 bytes less the
/// payload for each. A KeepAlive heartbeat is a frame of about 30 bytes, so a stream window
/// of 256 KiB holds at most ~9,000 of them, ~2 MiB of that budget, and a connection window
/// of 16 MiB (a budget of 8 MiB) leaves room for several paused KeepAlive streams on one
/// connection. tickd reads heartbeats as they come (see `api::KEEPALIVE_IN_FLIGHT`), so a
/// client sending faster than tickd answers meets flow control and waits, instead of losing
/// its connection.
pub(super) fn http2_server(config: &Config) -> Server {
    Server::builder()
        .initial_stream_window_size(256 * 1024)
        .initial_connection_window_size(16 * 1024 * 1024)
        .max_concurrent_streams(config.max_streams_per_connection)
        .http2_keepalive_interval(Some(config.http2_keepalive_interval))
        .http2_keepalive_timeout(Some(config.http2_keepalive_timeout))
        // hyper's guard against rapid reset (CVE-2023-44487), which tonic turns off by default.
        .http2_max_local_error_reset_streams(Some(1_024))
        .http2_max_pending_accept_reset_streams(Some(100))
}

/// Descriptors kept for everything but connections: the log's segments, snapshots and
/// directory, listeners, the database's connections, the runtime.
const RESERVED_DESCRIPTORS: u64 = 256;

/// `--max-connections`, lowered if need be so that connections alone can never take the
/// descriptors the log needs: running out there would stop tickd (see fail-stop).
pub(super) fn connection_budget(config: &Config) -> usize {
    let Ok((soft_limit, _)) = rlimit::getrlimit(rlimit::Resource::NOFILE) else {
        return config.max_connections;
    };
    let available = soft_limit.saturating_sub(RESERVED_DESCRIPTORS);
    let budget = usize::try_from(available).unwrap_or(usize::MAX);
    if budget < config.max_connections {
        warn!(
            max_connections = config.max_connections,
            open_file_limit = soft_limit,
            budget,
            "--max-connections lowered to what the open file limit leaves"
        );
    }
    config.max_connections.min(budget).max(1)
}

/// Raises the soft limit on open files to the hard limit, so that `--max-connections` is
/// what bounds connections, not a soft default of 1,024.
pub fn raise_open_file_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => {
            info!(
                open_file_limit = limit,
                "raised the open file limit to the hard limit"
            );
        }
        Err(error) => warn!(%error, "could not raise the open file limit"),
    }
}
