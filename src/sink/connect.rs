//! Connecting a sink to the addresses `--sink-allow` allows, and to nothing else: the
//! address loop every sink shares ([`each_allowed_address`]), and the connector under the
//! HTTP and gRPC sinks' client that dials plain TCP through it ([`AllowedConnector`]).
//!
//! Each new connection resolves the sink's host through
//! [`SinkAllow::allowed_addresses`], literal or not, and dials only what that returns, so
//! the address checked is the address connected to: DNS answering differently between a
//! check and a dial cannot send a sink elsewhere. The allowed addresses are tried in the
//! resolver's order, each with its own [`CONNECT_TIMEOUT`], so that a first address that
//! drops packets costs its own time and does not use up the next one's. The NATS and
//! Redis sinks hand each address to their client in the closure they give
//! [`each_allowed_address`].
//!
//! hyper-util's `HttpConnector` takes a custom resolver, which could filter addresses,
//! but it dials an IP-literal host (`http://10.1.2.3/`) without asking its resolver, so
//! such a check would miss exactly the URLs that need no DNS; hence a connector of our
//! own. It speaks `http` only. TLS is the layer above ([`super::tls::SinkConnector`],
//! which wraps this one), so that the check stays in one place whichever scheme a sink
//! uses.
//!
//! A refusal reaches the HTTP client's caller as the connect error's source, an
//! [`io::Error`] wrapping a [`SinkRefused`]; [`sink_refusal`] digs it out again.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::allow::{SinkAllow, SinkRefused};
use crate::domain::with_causes;

/// A connection is given up on after this long an address; the push is then unreachable
/// (no attempt counted), not late.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects to the first address of `host` that `allow` allows and `connect` succeeds
/// with, trying them in the resolver's order.
///
/// Each address gets its own [`CONNECT_TIMEOUT`], rather than one timeout around them all,
/// so that an address that never answers (a firewall dropping packets, a stale DNS
/// record) costs only its own time and the next address is still tried in full. The host
/// is resolved and checked now, on every call, so every connection made through it goes
/// to an address allowed at that moment; `connect` is handed only those addresses, never
/// the host's name, so that nothing resolves it again behind the check. (A NATS client's
/// own reconnections do not come through here: `nats::recheck` checks each of them.)
///
/// `connect` makes the whole connection to one address (TCP, and whatever handshake a
/// client adds: a NATS `CONNECT`, a Redis `AUTH`), all of it within the address's time.
pub(crate) async fn each_allowed_address<T, E, F, Fut>(
    allow: &SinkAllow,
    host: &str,
    port: u16,
    connect: F,
) -> Result<T, ConnectFailure<E>>
where
    F: FnMut(SocketAddr) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let addresses = allow
        .allowed_addresses(host, port)
        .await
        .map_err(ConnectFailure::Refused)?;
    first_address_that_connects(addresses, connect).await
}

/// The address loop of [`each_allowed_address`], apart from the resolution so that a
/// test can give it several addresses without a DNS name that has them.
async fn first_address_that_connects<T, E, F, Fut>(
    addresses: Vec<SocketAddr>,
    mut connect: F,
) -> Result<T, ConnectFailure<E>>
where
    F: FnMut(SocketAddr) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut failures = Vec::with_capacity(addresses.len());
    for address in addresses {
        match tokio::time::timeout(CONNECT_TIMEOUT, connect(address)).await {
            Ok(Ok(connection)) => return Ok(connection),
            Ok(Err(error)) => failures.push((address, AddressFailure::Failed(error))),
            Err(_elapsed) => {
                failures.push((address, AddressFailure::NoAnswerWithin(CONNECT_TIMEOUT)));
            }
        }
    }
    Err(ConnectFailure::EveryAddressFailed(failures))
}

/// Why [`each_allowed_address`] made no connection.
#[derive(Debug)]
pub(crate) enum ConnectFailure<E> {
    /// `--sink-allow` refused the host, or its lookup failed, before any address was
    /// dialled.
    Refused(SinkRefused),
    /// Every allowed address was dialled and failed: each with why, in the order tried.
    EveryAddressFailed(Vec<(SocketAddr, AddressFailure<E>)>),
}

/// Why one allowed address was not connected to.
#[derive(Debug)]
pub(crate) enum AddressFailure<E> {
    /// It had not connected when its time was up.
    NoAnswerWithin(Duration),
    /// `connect` failed with this.
    Failed(E),
}

impl<E: Error> ConnectFailure<E> {
    /// One line for a push's `Unreachable` reason or a sink's status. `destination` is
    /// the sink as its messages show it (without credentials); a refusal names its host
    /// and `--sink-allow` already.
    pub(crate) fn describe(&self, destination: &dyn fmt::Display) -> String {
        match self {
            ConnectFailure::Refused(refusal) => refusal.to_string(),
            ConnectFailure::EveryAddressFailed(failures) => {
                every_address_failed(destination, failures)
            }
        }
    }
}

impl<E: Error> fmt::Display for AddressFailure<E> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddressFailure::NoAnswerWithin(connect_timeout) => write!(
                formatter,
                "no answer within {}",
                humantime::format_duration(*connect_timeout)
            ),
            // A client's error often says only "connection failed" and keeps the reason
            // (refused, reset, bad credentials) in its sources.
            AddressFailure::Failed(error) => formatter.write_str(&with_causes(error)),
        }
    }
}

/// Every address tried, each with why it failed, so that a host with several addresses
/// does not show only the last one's reason.
fn every_address_failed<E: Error>(
    destination: &dyn fmt::Display,
    failures: &[(SocketAddr, AddressFailure<E>)],
) -> String {
    let reasons: Vec<String> = failures
        .iter()
        .map(|(address, why)| format!("{address}: {why}"))
        .collect();
    format!(
        "could not connect to {destination} ({})",
        reasons.join("; ")
    )
}

/// A `tower::Service<Uri>` for `hyper_util::client::legacy::Client`, dialling only the
/// allowed addresses of the URL's host.
#[derive(Clone, Debug)]
pub(crate) struct AllowedConnector {
    allow: Arc<SinkAllow>,
}

impl AllowedConnector {
    /// Each address tried has [`CONNECT_TIMEOUT`], not the whole connection: a host with
    /// an unreachable first address still gets its full time on the next one.
    pub(crate) fn new(allow: Arc<SinkAllow>) -> AllowedConnector {
        AllowedConnector { allow }
    }
}

impl tower::Service<Uri> for AllowedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<TcpStream>>> + Send>>;

    fn poll_ready(&mut self, _context: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Nothing is pooled or limited here; every call starts its own connection.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, destination: Uri) -> Self::Future {
        let allow = Arc::clone(&self.allow);
        Box::pin(async move { connect_to_allowed_address(&allow, &destination).await })
    }
}

/// The [`SinkRefused`] inside an error from a client over [`AllowedConnector`], if a
/// refusal is what it is.
///
/// The connector returns the refusal as an [`io::Error`] wrapping it (hyper's connectors
/// speak `io::Error`); the client error carries that `io::Error` as its source. The
/// `io::Error`'s own `source()` skips the value it wraps (it is its `Display`), so the
/// walk down the chain takes [`io::Error::get_ref`] of each `io::Error` and downcasts that.
pub(crate) fn sink_refusal<'error>(
    error: &'error (dyn Error + 'static),
) -> Option<&'error SinkRefused> {
    std::iter::successors(Some(error), |&error| error.source()).find_map(|error| {
        error.downcast_ref::<SinkRefused>().or_else(|| {
            error
                .downcast_ref::<io::Error>()
                .and_then(io::Error::get_ref)
                .and_then(|inner| inner.downcast_ref::<SinkRefused>())
        })
    })
}

async fn connect_to_allowed_address(
    allow: &SinkAllow,
    destination: &Uri,
) -> io::Result<TokioIo<TcpStream>> {
    let (host, port) = plain_http_host_and_port(destination)?;
    let stream = each_allowed_address(allow, host, port, TcpStream::connect)
        .await
        .map_err(|failure| connect_failure_as_io_error(destination, failure))?;
    // hyper may write a request's head and body in two writes; with Nagle's algorithm the
    // second waits for the first one's ACK, which the server may hold back (delayed ACK)
    // for tens of milliseconds.
    stream.set_nodelay(true)?;
    Ok(TokioIo::new(stream))
}

/// The host and port of an `http` URL; any other scheme is refused, `https` with the
/// reason.
fn plain_http_host_and_port(destination: &Uri) -> io::Result<(&str, u16)> {
    match destination.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{destination}: TLS is not handled by this connector (it dials plain \
                     TCP for http:// sinks; https:// needs a TLS connector over it)"
                ),
            ))
        }
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{destination}: a sink URL's scheme is http, not {}",
                    other.unwrap_or("missing")
                ),
            ))
        }
    }
    let host = destination.host().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{destination}: a sink URL names a host"),
        )
    })?;
    Ok((host, destination.port_u16().unwrap_or(80)))
}

/// The kind says what the caller can do: a list's refusal is a permission matter, a
/// failed lookup keeps the resolver's kind.
fn refusal_as_io_error(refusal: SinkRefused) -> io::Error {
    let kind = match &refusal {
        SinkRefused::NotAllowed { .. } => io::ErrorKind::PermissionDenied,
        SinkRefused::LookupFailed { source, .. } => source.kind(),
    };
    io::Error::new(kind, refusal)
}

/// A failed connection as hyper's connectors report it. The kind says what the caller can
/// do: a refusal's as [`refusal_as_io_error`] gives it, else the last address's (the
/// others' reasons are in the message).
fn connect_failure_as_io_error(destination: &Uri, failure: ConnectFailure<io::Error>) -> io::Error {
    let failures = match failure {
        ConnectFailure::Refused(refusal) => return refusal_as_io_error(refusal),
        ConnectFailure::EveryAddressFailed(failures) => failures,
    };
    let kind = failures
        .last()
        .map_or(io::ErrorKind::NotConnected, |(_, why)| match why {
            AddressFailure::NoAnswerWithin(_) => io::ErrorKind::TimedOut,
            AddressFailure::Failed(error) => error.kind(),
        });
    io::Error::new(kind, every_address_failed(destination, &failures))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use hyper::server::conn::http1;
    use hyper::{Request, Response, StatusCode};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use tokio::net::TcpListener;
    use tower::Service;

    use super::*;

    fn connector(entries: &[&str]) -> AllowedConnector {
        let entries: Vec<String> = entries.iter().map(|entry| entry.to_string()).collect();
        let allow = SinkAllow::parse(&entries).expect("a valid allow list");
        AllowedConnector::new(Arc::new(allow))
    }

    /// A server on 127.0.0.1 answering each request with 200 and the path it asked for.
    async fn path_echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("local address");
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let echo_path = hyper::service::service_fn(|request: Request<_>| async move {
                        let path = request.uri().path().to_owned();
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(path))))
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), echo_path)
                        .await;
                });
            }
        });
        address
    }

    #[tokio::test]
    async fn connects_to_an_allowed_loopback_listener() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("local address");
        let uri: Uri = format!("http://{address}/hook").parse().expect("a URI");
        let (connected, accepted) = tokio::join!(connector(&[]).call(uri), listener.accept());
        let connected = connected.expect("loopback is allowed by default");
        let (_, client_address) = accepted.expect("the listener accepted");
        assert_eq!(connected.inner().peer_addr().expect("peer"), address);
        assert_eq!(
            connected.inner().local_addr().expect("local"),
            client_address
        );
        assert!(connected.inner().nodelay().expect("TCP_NODELAY readable"));
    }

    #[tokio::test]
    async fn a_client_over_the_connector_gets_the_servers_answer() {
        let address = path_echo_server().await;
        let client = Client::builder(TokioExecutor::new())
            .build::<_, Full<Bytes>>(connector(&["127.0.0.1"]));
        // By name too: `localhost` is resolved and its allowed address dialled.
        for host in [address.ip().to_string(), "localhost".to_owned()] {
            let uri: Uri = format!("http://{host}:{}/hook", address.port())
                .parse()
                .expect("a URI");
            let response = client.get(uri).await.expect("an allowed sink");
            assert_eq!(response.status(), StatusCode::OK, "{host}");
            let body = response
                .into_body()
                .collect()
                .await
                .expect("the body")
                .to_bytes();
            assert_eq!(body, Bytes::from_static(b"/hook"), "{host}");
        }
    }

    #[tokio::test]
    async fn an_address_outside_the_list_is_refused_before_any_connection() {
        let uri: Uri = "http://10.255.255.1:9/".parse().expect("a URI");
        let error = connector(&["127.0.0.1"])
            .call(uri.clone())
            .await
            .expect_err("10.255.255.1 is not on the list");
        assert_eq!(error.kind(), io::ErrorKind::PermissionDenied);
        // `NotAllowed` comes out of the check, which runs before any dial and returns
        // instead of dialling: this error says no connection was attempted.
        match sink_refusal(&error) {
            Some(SinkRefused::NotAllowed { host, resolved, .. }) => {
                assert_eq!(host, "10.255.255.1");
                assert_eq!(
                    resolved,
                    &["10.255.255.1".parse::<std::net::IpAddr>().expect("ip")]
                );
            }
            other => panic!("expected the not-allowed refusal, got {other:?} from {error}"),
        }
        assert!(error.to_string().contains("--sink-allow"), "{error}");

        // Through a client the refusal is the connect error's source.
        let client = Client::builder(TokioExecutor::new())
            .build::<_, Full<Bytes>>(connector(&["127.0.0.1"]));
        let error = client.get(uri).await.expect_err("refused");
        assert!(error.is_connect(), "{error:?}");
        assert!(
            matches!(sink_refusal(&error), Some(SinkRefused::NotAllowed { .. })),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn https_and_other_schemes_are_not_dialled() {
        let mut connector = connector(&[]);
        let error = connector
            .call("https://127.0.0.1:1/".parse().expect("a URI"))
            .await
            .expect_err("no TLS here");
        assert_eq!(error.kind(), io::ErrorKind::Unsupported);
        assert!(error.to_string().contains("TLS is not handled"), "{error}");
        assert!(sink_refusal(&error).is_none());

        let error = connector
            .call("ftp://127.0.0.1:1/".parse().expect("a URI"))
            .await
            .expect_err("not http");
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }

    #[tokio::test]
    async fn an_allowed_address_that_refuses_is_a_connect_error_not_a_refusal() {
        // A port that was just free: bound, then released.
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("local address");
        drop(listener);
        let error = connector(&[])
            .call(format!("http://{address}/").parse().expect("a URI"))
            .await
            .expect_err("nothing listens");
        assert!(sink_refusal(&error).is_none(), "{error}");
        assert_eq!(error.kind(), io::ErrorKind::ConnectionRefused, "{error}");
        assert!(error.to_string().contains(&address.to_string()), "{error}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_that_never_answers_does_not_hide_the_next_one() {
        // Documentation addresses (TEST-NET-1): the closures answer for them, nothing dials.
        let silent: SocketAddr = "192.0.2.1:4222".parse().expect("an address");
        let answering: SocketAddr = "192.0.2.2:4222".parse().expect("an address");
        let mut tried = Vec::new();
        let connected = first_address_that_connects(vec![silent, answering], |address| {
            tried.push(address);
            async move {
                if address == silent {
                    std::future::pending::<()>().await;
                }
                Ok::<_, io::Error>(address)
            }
        })
        .await;
        assert_eq!(connected.expect("the second address answers"), answering);
        assert_eq!(tried, [silent, answering]);

        // When the second fails too, the failure names both, the silent one timed out.
        let refused = io::ErrorKind::ConnectionRefused;
        let failure = first_address_that_connects(vec![silent, answering], |address| async move {
            if address == silent {
                std::future::pending::<()>().await;
            }
            Err::<(), _>(io::Error::from(refused))
        })
        .await
        .expect_err("neither connects");
        let message = failure.describe(&"nats://sink.example:4222/expired");
        let ConnectFailure::EveryAddressFailed(failures) = failure else {
            panic!("expected every address to fail, got {message}");
        };
        assert_eq!(failures.len(), 2, "{message}");
        assert_eq!(failures[0].0, silent);
        assert!(
            matches!(failures[0].1, AddressFailure::NoAnswerWithin(time) if time == CONNECT_TIMEOUT),
            "{message}"
        );
        assert_eq!(failures[1].0, answering);
        assert!(
            matches!(&failures[1].1, AddressFailure::Failed(error) if error.kind() == refused),
            "{message}"
        );
        assert_eq!(
            message,
            format!(
                "could not connect to nats://sink.example:4222/expired (192.0.2.1:4222: no \
                 answer within 5s; 192.0.2.2:4222: {})",
                io::Error::from(refused)
            )
        );
    }

    #[tokio::test]
    async fn a_host_outside_the_list_is_refused_and_connect_never_called() {
        let allow = SinkAllow::parse(&["127.0.0.1".to_owned()]).expect("a valid allow list");
        let mut tried = Vec::new();
        let failure = each_allowed_address(&allow, "10.255.255.1", 6379, |address| {
            tried.push(address);
            async { Ok::<_, io::Error>(()) }
        })
        .await
        .expect_err("10.255.255.1 is not on the list");
        assert!(tried.is_empty(), "{tried:?}");
        assert!(
            matches!(
                failure,
                ConnectFailure::Refused(SinkRefused::NotAllowed { .. })
            ),
            "{failure:?}"
        );
        let message = failure.describe(&"redis://10.255.255.1:6379/expired");
        assert!(message.contains("--sink-allow"), "{message}");
    }
}
