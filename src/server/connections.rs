//! Accepting connections without letting a flood of them take the process down.
//!
//! tonic's own accept loop takes every connection, gives each a task and HTTP/2 state
//! before the peer has said a word, and spins when the process runs out of file
//! descriptors. [`incoming`] replaces it with one task per listener that:
//! - refuses (closes at once) a connection beyond `--max-connections` open ones;
//! - holds a new connection aside, cheaply, until it has sent the 24 bytes of the HTTP/2
//!   client preface (or the start of a TLS hello), for at most `--handshake-timeout`; of
//!   those waiting, at most `--max-handshaking` are kept and the oldest is closed to make
//!   room, so idle sockets can never keep a real client out for long;
//! - backs off for a moment when `accept` fails for lack of descriptors or memory, instead
//!   of retrying in a hot loop (the pending connection stays in the kernel's backlog).
//!
//! Each connection handed to tonic is a [`Connection`]: it replays the preface bytes read
//! here, closes itself after `--idle-timeout` without an open call (see
//! [`super::calls`]), and carries a [`ConnectionInfo`] that tonic puts in every request's
//! extensions.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Sleep;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;
use tracing::{debug, warn};

use crate::api::streams::ConnectionStreams;
use crate::metrics::connections::CloseReason;
use crate::metrics::Metrics;

/// Bytes a client sends first: the HTTP/2 connection preface (`PRI * HTTP/2.0...`), or
/// the first bytes of a TLS ClientHello, which is longer.
const PREFACE_BYTES: usize = 24;

/// Bytes received this recently keep a connection open past its idle deadline.
const READ_GRACE: Duration = Duration::from_secs(1);

/// How long the accept loop pauses when the process is out of descriptors or memory.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionLimits {
    pub(crate) max_connections: usize,
    pub(crate) max_handshaking: usize,
    pub(crate) handshake_timeout: Duration,
    pub(crate) idle_timeout: Duration,
}

/// A listener tickd serves gRPC on.
pub(crate) trait Accept: Send + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept(&self) -> impl Future<Output = io::Result<Self::Stream>> + Send;
}

impl Accept for TcpListener {
    type Stream = TcpStream;
    async fn accept(&self) -> io::Result<TcpStream> {
        let (stream, _) = TcpListener::accept(self).await?;
        // Without TCP_NODELAY small answers wait for Nagle's algorithm (tens of ms).
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

impl Accept for UnixListener {
    type Stream = UnixStream;
    async fn accept(&self) -> io::Result<UnixStream> {
        UnixListener::accept(self).await.map(|(stream, _)| stream)
    }
}

/// What the accept loops of every listener share: the limits, and one count of open
/// connections, since `--max-connections` is one budget of file descriptors for them all.
#[derive(Clone)]
pub(crate) struct Acceptor {
    pub(crate) limits: ConnectionLimits,
    pub(crate) open: Arc<AtomicUsize>,
    pub(crate) metrics: Arc<Metrics>,
}

impl Acceptor {
    /// See [`incoming`].
    pub(crate) fn incoming<L: Accept>(
        &self,
        listener: L,
    ) -> ReceiverStream<io::Result<Connection<L::Stream>>> {
        incoming(
            listener,
            self.limits,
            self.open.clone(),
            self.metrics.clone(),
        )
    }
}

/// The connections of `listener` that completed their preface, for tonic's
/// `serve_with_incoming`. The accept task ends when tonic drops the stream.
/// `open` counts the connections of every listener: `--max-connections` is one budget
/// of file descriptors for them all.
pub(crate) fn incoming<L: Accept>(
    listener: L,
    limits: ConnectionLimits,
    open: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
) -> ReceiverStream<io::Result<Connection<L::Stream>>> {
    let (ready, incoming) = mpsc::channel(64);
    tokio::spawn(accept_loop(listener, limits, open, metrics, ready));
    ReceiverStream::new(incoming)
}

async fn accept_loop<L: Accept>(
    listener: L,
    limits: ConnectionLimits,
    open: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
    ready: mpsc::Sender<io::Result<Connection<L::Stream>>>,
) {
    let handshaking = Arc::new(Handshaking::default());
    let mut last_warning: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = ready.closed() => return,
        };
        let stream = match accepted {
            Ok(stream) => stream,
            Err(error) if is_resource_exhaustion(&error) => {
                if last_warning.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
                    warn!(%error, open = open.load(Ordering::Relaxed), "accept failed: backing off");
                    last_warning = Some(Instant::now());
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
            // The peer gave up before we took it (ECONNABORTED and the like).
            Err(error) => {
                debug!(%error, "accept failed");
                continue;
            }
        };
        if open.load(Ordering::Relaxed) >= limits.max_connections {
            metrics.connections.closed(CloseReason::Limit);
            drop(stream);
            continue;
        }
        let slot = Slot::take(&open, &metrics);
        if let Some(oldest) = handshaking.evict_beyond(limits.max_handshaking) {
            if let Some(task) = oldest {
                task.abort();
            }
            metrics.connections.closed(CloseReason::Evicted);
        }
        let (metrics, ready) = (metrics.clone(), ready.clone());
        handshaking.spawn(|entry| handshake(stream, slot, limits, metrics, ready, entry));
    }
}

/// Waits for the preface, then hands the connection to tonic.
async fn handshake<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    mut stream: S,
    slot: Slot,
    limits: ConnectionLimits,
    metrics: Arc<Metrics>,
    ready: mpsc::Sender<io::Result<Connection<S>>>,
    entry: HandshakeEntry,
) {
    let mut preface = [0u8; PREFACE_BYTES];
    match tokio::time::timeout(limits.handshake_timeout, stream.read_exact(&mut preface)).await {
        Ok(Ok(_)) => {}
        // The peer closed or reset before finishing its preface.
        Ok(Err(_)) => return,
        Err(_) => {
            metrics.connections.closed(CloseReason::HandshakeTimeout);
            return;
        }
    }
    if !entry.leave() {
        // Evicted while finishing its preface: the evictor counted it closed.
        return;
    }
    let connection = Connection::new(stream, preface, slot, &limits, metrics);
    let _ = ready.send(Ok(connection)).await;
}

fn is_resource_exhaustion(error: &io::Error) -> bool {
    // EMFILE, ENFILE, ENOBUFS, ENOMEM: the kernel keeps the connection; retrying at once
    // would fail the same way.
    matches!(error.raw_os_error(), Some(24 | 23 | 105 | 12))
}

/// The connections still waiting for their preface, oldest first.
#[derive(Default)]
struct Handshaking {
    next_id: AtomicU64,
    waiting: Mutex<BTreeMap<u64, Option<AbortHandle>>>,
}

impl Handshaking {
    /// Runs a handshake task, registered as waiting until it ends. The entry is made
    /// before the task exists, so that a task that ends at once finds it to remove; no
    /// lock is held while spawning.
    fn spawn<F>(self: &Arc<Self>, handshake: impl FnOnce(HandshakeEntry) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, None);
        let entry = HandshakeEntry {
            id,
            handshaking: self.clone(),
        };
        let task = tokio::spawn(handshake(entry)).abort_handle();
        if let Some(waiting) = self.lock().get_mut(&id) {
            *waiting = Some(task);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Option<AbortHandle>>> {
        self.waiting.lock().expect("handshaking lock")
    }

    /// The oldest waiting connection's task, removed from the list, if `limit` are already
    /// waiting. (A task not yet registered finds itself evicted when its preface is in.)
    fn evict_beyond(&self, limit: usize) -> Option<Option<AbortHandle>> {
        let mut waiting = self.lock();
        (waiting.len() >= limit)
            .then(|| waiting.pop_first().map(|(_, task)| task))
            .flatten()
    }
}

/// Takes a connection off the waiting list when its handshake task ends, however it ends.
struct HandshakeEntry {
    id: u64,
    handshaking: Arc<Handshaking>,
}

impl HandshakeEntry {
    /// Leaves the waiting list; false if the connection was evicted meanwhile. Whoever
    /// removes the entry decides: the evictor, or the handshake that finished first.
    fn leave(&self) -> bool {
        self.handshaking.lock().remove(&self.id).is_some()
    }
}

impl Drop for HandshakeEntry {
    fn drop(&mut self) {
        self.leave();
    }
}

/// One place among `--max-connections`, given back when the connection is dropped.
struct Slot {
    open: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
}

impl Slot {
    fn take(open: &Arc<AtomicUsize>, metrics: &Arc<Metrics>) -> Self {
        open.fetch_add(1, Ordering::Relaxed);
        metrics.connections.open.inc();
        Self {
            open: open.clone(),
            metrics: metrics.clone(),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
        self.metrics.connections.open.dec();
    }
}

/// What tonic puts in the extensions of every request on a [`Connection`]: its calls in
/// progress (for the idle timeout) and its streams (for the per-connection limits).
#[derive(Clone)]
pub(crate) struct ConnectionInfo {
    pub(crate) state: Arc<ConnectionState>,
}

pub(crate) struct ConnectionState {
    opened: Instant,
    /// Until its first call, a connection is still in its handshake (TLS, HTTP/2 settings):
    /// `--handshake-timeout` bounds it, not `--idle-timeout`.
    handshake_timeout: Duration,
    any_call: std::sync::atomic::AtomicBool,
    calls_open: AtomicUsize,
    /// Milliseconds after `opened` at which the last call ended.
    idle_since_ms: AtomicU64,
    pub(crate) streams: Arc<ConnectionStreams>,
}

impl ConnectionState {
    fn new(handshake_timeout: Duration) -> Self {
        Self {
            opened: Instant::now(),
            handshake_timeout,
            any_call: std::sync::atomic::AtomicBool::new(false),
            calls_open: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
            streams: Arc::default(),
        }
    }

    pub(crate) fn call_started(&self) {
        self.any_call.store(true, Ordering::Release);
        self.calls_open.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn call_ended(&self) {
        let elapsed = self.opened.elapsed().as_millis() as u64;
        self.idle_since_ms.store(elapsed, Ordering::Release);
        self.calls_open.fetch_sub(1, Ordering::AcqRel);
    }

    /// When the connection becomes idle for `timeout`, or None while a call is open.
    fn idle_deadline(&self, timeout: Duration) -> Option<Instant> {
        if self.calls_open.load(Ordering::Acquire) > 0 {
            return None;
        }
        if !self.any_call.load(Ordering::Acquire) {
            return Some(self.opened + self.handshake_timeout.min(timeout));
        }
        let idle_since = Duration::from_millis(self.idle_since_ms.load(Ordering::Acquire));
        Some(self.opened + idle_since + timeout)
    }
}

/// An accepted connection as tonic sees it.
pub(crate) struct Connection<S> {
    stream: S,
    preface: [u8; PREFACE_BYTES],
    /// Preface bytes already handed to the reader.
    replayed: usize,
    idle_timeout: Duration,
    idle_timer: Pin<Box<Sleep>>,
    /// When bytes last arrived. A request read but not yet counted as a call (hyper counts
    /// it once its task first runs) must not find its connection closed under it.
    last_read: Instant,
    info: ConnectionInfo,
    metrics: Arc<Metrics>,
    _slot: Slot,
}

impl<S> Connection<S> {
    fn new(
        stream: S,
        preface: [u8; PREFACE_BYTES],
        slot: Slot,
        limits: &ConnectionLimits,
        metrics: Arc<Metrics>,
    ) -> Self {
        let idle_timeout = limits.idle_timeout;
        let state = ConnectionState::new(limits.handshake_timeout);
        let first_deadline = state.opened + limits.handshake_timeout.min(idle_timeout);
        Self {
            stream,
            preface,
            replayed: 0,
            idle_timeout,
            idle_timer: Box::pin(tokio::time::sleep_until(first_deadline.into())),
            last_read: Instant::now(),
            info: ConnectionInfo {
                state: Arc::new(state),
            },
            metrics,
            _slot: slot,
        }
    }

    /// True once the connection has had no open call for the idle timeout. Otherwise the
    /// timer is re-armed (and registered with `context`) for the next possible moment.
    fn poll_idle(&mut self, context: &mut Context<'_>) -> bool {
        while self.idle_timer.as_mut().poll(context).is_ready() {
            let now = Instant::now();
            let quiet_since = self.last_read + READ_GRACE;
            match self.info.state.idle_deadline(self.idle_timeout) {
                Some(deadline) if deadline <= now && quiet_since <= now => return true,
                Some(deadline) if deadline <= now => {
                    self.idle_timer.as_mut().reset(quiet_since.into())
                }
                Some(deadline) => self.idle_timer.as_mut().reset(deadline.into()),
                None => self
                    .idle_timer
                    .as_mut()
                    .reset((now + self.idle_timeout).into()),
            }
        }
        false
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Connection<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.replayed < PREFACE_BYTES {
            let rest = &this.preface[this.replayed..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.replayed += n;
            return Poll::Ready(Ok(()));
        }
        if this.poll_idle(context) {
            this.metrics.connections.closed(CloseReason::Idle);
            debug!(idle_timeout = ?this.idle_timeout, "closing an idle connection");
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no call for --idle-timeout",
            )));
        }
        let filled = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(context, buf);
        if buf.filled().len() > filled {
            this.last_read = Instant::now();
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Connection<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(context, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(context)
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(context)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(context, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl<S> Connected for Connection<S> {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        self.info.clone()
    }
}
