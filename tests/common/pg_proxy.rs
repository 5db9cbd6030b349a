//! A TCP proxy between one replica and PostgreSQL, to cut that replica off from the
//! database without touching the others: [`PgProxy::black_hole`] stops forwarding in both
//! directions but keeps every socket open (the replica sees no error, only silence, also
//! on connections it opens meanwhile: they are accepted and never answered), and
//! [`PgProxy::reset`] closes every connection abruptly (RST) and passes traffic again.
//!
//! Each accepted connection is served by one task, which copies both ways while the
//! proxy passes traffic. Black-holed, it stops reading from either side, so whatever the
//! peers send stays in the kernel's buffers, and whatever it had read but not yet written
//! is held. A reset bumps the proxy's generation: every connection accepted under an older
//! one is dropped with a zero linger, which sends RST instead of FIN. Dropping the proxy
//! does the same to every connection.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How much one read takes from a side.
const BUFFER: usize = 64 * 1024;

/// What the proxy does with traffic now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mode {
    /// Forwarding is suspended, sockets kept.
    black_holed: bool,
    /// Connections accepted under an earlier generation are to be closed.
    generation: u64,
}

pub(crate) struct PgProxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    acceptor: JoinHandle<()>,
}

impl PgProxy {
    /// Listens on 127.0.0.1:0, forwarding to PostgreSQL on 127.0.0.1:`upstream_port`.
    pub(crate) async fn start(upstream_port: u16) -> PgProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let upstream = SocketAddr::from(([127, 0, 0, 1], upstream_port));
        let mode = watch::Sender::new(Mode {
            black_holed: false,
            generation: 0,
        });
        let acceptor = tokio::spawn(accept(listener, upstream, mode.clone()));
        PgProxy {
            addr,
            mode,
            acceptor,
        }
    }

    /// Where clients connect (the replica's `--store` host and port).
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding on every connection, present and future, keeping them open.
    pub(crate) fn black_hole(&self) {
        self.mode.send_modify(|mode| mode.black_holed = true);
    }

    /// Closes every connection abruptly, and forwards the new ones again.
    pub(crate) fn reset(&self) {
        self.mode.send_modify(|mode| {
            mode.black_holed = false;
            mode.generation += 1;
        });
    }
}

impl Drop for PgProxy {
    /// No new connections; the ones open see the mode's sender gone and close.
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, mode: watch::Sender<Mode>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let watching = mode.subscribe();
        let generation = watching.borrow().generation;
        tokio::spawn(serve(client, upstream, watching, generation));
    }
}

/// One connection, until either side closes it or a reset (or the proxy's end) cuts it.
/// The upstream connection is opened only once traffic passes: a connection made while
/// black-holed is accepted and then silent.
async fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    mut mode: watch::Receiver<Mode>,
    generation: u64,
) {
    let _ = client.set_nodelay(true);
    if !passing(&mut mode, generation).await {
        return abort(client);
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return abort(client);
    };
    let _ = server.set_nodelay(true);
    let (mut client_reader, mut client_writer) = client.into_split();
    let (mut server_reader, mut server_writer) = server.into_split();
    let mut from_client = vec![0; BUFFER];
    let mut from_server = vec![0; BUFFER];
    loop {
        if !passing(&mut mode, generation).await {
            break;
        }
        // Whichever side speaks first; the read is given up if the mode changes, so that
        // nothing read is forwarded once black-holed.
        let (read, towards_server) = tokio::select! {
            read = client_reader.read(&mut from_client) => (read, true),
            read = server_reader.read(&mut from_server) => (read, false),
            _ = mode.changed() => continue,
        };
        let length = match read {
            Ok(0) | Err(_) => break,
            Ok(length) => length,
        };
        // Read before a black hole began: held until traffic passes again (or dropped by
        // a reset).
        if !passing(&mut mode, generation).await {
            break;
        }
        let written = if towards_server {
            server_writer.write_all(&from_client[..length]).await
        } else {
            client_writer.write_all(&from_server[..length]).await
        };
        if written.is_err() {
            break;
        }
    }
    let client = client_reader
        .reunite(client_writer)
        .expect("one connection's halves");
    let server = server_reader
        .reunite(server_writer)
        .expect("one connection's halves");
    abort(server);
    abort(client);
}

/// Waits while black-holed; true once traffic passes for connections of `generation`,
/// false if they are to be closed (a reset, or the proxy gone).
async fn passing(mode: &mut watch::Receiver<Mode>, generation: u64) -> bool {
    let outcome = mode
        .wait_for(|now| now.generation != generation || !now.black_holed)
        .await
        .map(|now| now.generation == generation);
    outcome.unwrap_or(false)
}

/// Closes `stream` with RST rather than FIN: the peer sees its connection reset.
fn abort(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}
