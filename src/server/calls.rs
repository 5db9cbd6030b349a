//! The outermost layer around every call: it counts the call against its connection (for
//! the idle timeout), hands the API the connection's stream counters, and refuses a
//! request message larger than `--max-request-bytes` from its 5-byte gRPC header, before
//! any of its body is buffered.
//!
//! It also bounds the long-lived streams of the standard services (health `Watch`,
//! reflection), which the API's own stream limits do not see: each holds a place among
//! `--max-watch-streams` for as long as its response lasts.
//!
//! tonic can refuse an oversized message too, but with OUT_OF_RANGE and a message that
//! names no flag; checking here lets the client read which limit it hit, as it can for
//! every other limit.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::transport::server::TlsConnectInfo;
use tonic::Status;

use super::connections::{ConnectionInfo, ConnectionState};

/// Bytes of the gRPC message header: a compression flag and a big-endian length.
const MESSAGE_HEADER_BYTES: usize = 5;

#[derive(Debug, Clone)]
pub(crate) struct CallLayer {
    max_request_bytes: usize,
    watch_streams: Arc<Semaphore>,
    max_watch_streams: usize,
    /// Turns true when the drain begins: watch streams then end (health `Watch` would
    /// otherwise hold the drain open to its timeout).
    stopping: watch::Receiver<bool>,
}

impl CallLayer {
    pub(crate) fn new(
        max_request_bytes: usize,
        max_watch_streams: usize,
        stopping: watch::Receiver<bool>,
    ) -> Self {
        Self {
            max_request_bytes,
            watch_streams: Arc::new(Semaphore::new(max_watch_streams)),
            max_watch_streams,
            stopping,
        }
    }
}

impl<S> tower::Layer<S> for CallLayer {
    type Service = CallService<S>;
    fn layer(&self, inner: S) -> CallService<S> {
        CallService {
            inner,
            limits: self.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct CallService<S> {
    inner: S,
    limits: CallLayer,
}

/// The standard services' methods that stream for as long as the client likes.
fn is_watch_stream(path: &str) -> bool {
    path == "/grpc.health.v1.Health/Watch" || path.starts_with("/grpc.reflection.")
}

impl<S> tower::Service<Request<Body>> for CallService<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let watching = is_watch_stream(request.uri().path());
        let watch_permit = match watching {
            false => None,
            true => match self.limits.watch_streams.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    let refusal = Status::resource_exhausted(format!(
                        "{} health Watch and reflection streams are open, the limit (--max-watch-streams)",
                        self.limits.max_watch_streams
                    ));
                    return Box::pin(std::future::ready(Ok(refusal.into_http())));
                }
            },
        };
        let connection = connection_of(&request);
        let (mut parts, body) = request.into_parts();
        let call = CallGuard {
            connection: connection.inspect(|state| {
                parts.extensions.insert(state.streams.clone());
                state.call_started();
            }),
            _watch_permit: watch_permit,
        };
        let body = Body::new(SizeLimitedBody {
            inner: body,
            limit: self.limits.max_request_bytes,
            header: [0; MESSAGE_HEADER_BYTES],
            header_filled: 0,
            body_left: 0,
        });
        let drain = watching
            .then(|| Box::pin(super::drain::stopped(self.limits.stopping.clone())) as Drain);
        let response = self.inner.call(Request::from_parts(parts, body));
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| {
                Body::new(TrackedBody {
                    inner: body,
                    _call: call,
                    drain,
                })
            }))
        })
    }
}

/// The connection a request came on, over TLS or not (tonic wraps the info under TLS).
fn connection_of<B>(request: &Request<B>) -> Option<Arc<ConnectionState>> {
    let extensions = request.extensions();
    extensions
        .get::<ConnectionInfo>()
        .or_else(|| {
            extensions
                .get::<TlsConnectInfo<ConnectionInfo>>()
                .map(TlsConnectInfo::get_ref)
        })
        .map(|info| info.state.clone())
}

/// A call in progress, from its headers to the end of its response: counted on its
/// connection, and holding its place if it is a watch stream.
struct CallGuard {
    connection: Option<Arc<ConnectionState>>,
    _watch_permit: Option<OwnedSemaphorePermit>,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some(connection) = &self.connection {
            connection.call_ended();
        }
    }
}

/// A response body that keeps its call counted until the body is gone.
/// For a watch stream, resolves when the drain begins.
type Drain = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

struct TrackedBody {
    inner: Body,
    _call: CallGuard,
    /// Some for a watch stream until the drain ends it (with UNAVAILABLE in its trailers).
    drain: Option<Drain>,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if let Some(drain) = &mut this.drain {
            if drain.as_mut().poll(context).is_ready() {
                this.drain = None;
                this.inner = Body::empty();
                let mut trailers = tonic::codegen::http::HeaderMap::new();
                let _ = Status::unavailable("tickd is shutting down").add_header(&mut trailers);
                return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
            }
        }
        Pin::new(&mut this.inner).poll_frame(context)
    }

    fn is_end_stream(&self) -> bool {
        self.drain.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that fails as soon as a message header announces more than `limit`
/// bytes. The error is a [`Status`], which tonic answers as it is.
struct SizeLimitedBody {
    inner: Body,
    limit: usize,
    header: [u8; MESSAGE_HEADER_BYTES],
    header_filled: usize,
    /// Bytes of the current message's body still to pass.
    body_left: usize,
}

impl SizeLimitedBody {
    /// Follows the message framing through one chunk of the body.
    fn inspect(&mut self, mut chunk: &[u8]) -> Result<(), Status> {
        while !chunk.is_empty() {
            if self.body_left > 0 {
                let skipped = self.body_left.min(chunk.len());
                self.body_left -= skipped;
                chunk.advance(skipped);
                continue;
            }
            let wanted = MESSAGE_HEADER_BYTES - self.header_filled;
            let taken = wanted.min(chunk.len());
            self.header[self.header_filled..self.header_filled + taken]
                .copy_from_slice(&chunk[..taken]);
            self.header_filled += taken;
            chunk.advance(taken);
            if self.header_filled == MESSAGE_HEADER_BYTES {
                self.header_filled = 0;
                let length = u32::from_be_bytes([
                    self.header[1],
                    self.header[2],
                    self.header[3],
                    self.header[4],
                ]) as usize;
                if length > self.limit {
                    return Err(Status::resource_exhausted(format!(
                        "request message of {length} bytes is over the limit of {} bytes (--max-request-bytes)",
                        self.limit
                    )));
                }
                self.body_left = length;
            }
        }
        Ok(())
    }
}

impl HttpBody for SizeLimitedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        let frame = match Pin::new(&mut this.inner).poll_frame(context) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        if let Some(data) = frame.data_ref() {
            this.inspect(data)?;
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(limit: usize) -> SizeLimitedBody {
        SizeLimitedBody {
            inner: Body::empty(),
            limit,
            header: [0; MESSAGE_HEADER_BYTES],
            header_filled: 0,
            body_left: 0,
        }
    }

    fn message(length: u32) -> Vec<u8> {
        let mut bytes = vec![0];
        bytes.extend_from_slice(&length.to_be_bytes());
        bytes.resize(MESSAGE_HEADER_BYTES + length as usize, 7);
        bytes
    }

    #[test]
    fn follows_messages_across_any_chunking() {
        let mut stream = message(10);
        stream.extend(message(100));
        stream.extend(message(0));
        for chunk_size in [1, 2, 5, 6, 64, stream.len()] {
            let mut limited = body(100);
            for chunk in stream.chunks(chunk_size) {
                limited
                    .inspect(chunk)
                    .expect("every message is within the limit");
            }
            assert_eq!((limited.header_filled, limited.body_left), (0, 0));
        }
    }

    #[test]
    fn refuses_a_header_over_the_limit_naming_the_flag() {
        let mut stream = message(10);
        stream.extend(message(101));
        for chunk_size in [1, 3, stream.len()] {
            let mut limited = body(100);
            let refusal = stream
                .chunks(chunk_size)
                .find_map(|chunk| limited.inspect(chunk).err())
                .expect("the second message is refused");
            assert_eq!(refusal.code(), tonic::Code::ResourceExhausted);
            assert!(refusal.message().contains("101 bytes"));
            assert!(refusal.message().contains("--max-request-bytes"));
        }
    }
}
