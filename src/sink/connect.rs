//! The connector under a sink's HTTP client: plain TCP to the addresses `--sink-allow`
//! allows, and to nothing else.
//!
//! hyper-util's `HttpConnector` takes a custom resolver, which could filter addresses,
//! but it dials an IP-literal host (`http://10.1.2.3/`) without asking its resolver, so
//! such a check would miss exactly the URLs that need no DNS. This connector resolves
//! through [`SinkAllow::allowed_addresses`] for every new connection, literal or not, and
//! dials only what that returns, so the address checked is the address connected to:
//! DNS answering differently between a check and a dial cannot send a sink elsewhere.
//!
//! It speaks `http` only. TLS is the layer above ([`super::tls::SinkConnector`], which
//! wraps this one), so that the check stays in one place whichever scheme a sink uses.
//!
//! A refusal reaches the client's caller as the connect error's source, an
//! [`io::Error`] wrapping a [`SinkRefused`]; [`sink_refusal`] digs it out again.

use std::error::Error;
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

/// A connection is given up on after this long an address; the push is then unreachable
/// (no attempt counted), not late.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A `tower::Service<Uri>` for `hyper_util::client::legacy::Client`, dialling only the
/// allowed addresses of the URL's host.
#[derive(Clone, Debug)]
pub(crate) struct AllowedConnector {
    allow: Arc<SinkAllow>,
    /// For each address tried, not for the whole connection: a host with an unreachable
    /// first address still gets its full time on the next one.
    connect_timeout: Duration,
}

impl AllowedConnector {
    pub(crate) fn new(allow: Arc<SinkAllow>, connect_timeout: Duration) -> AllowedConnector {
        AllowedConnector {
            allow,
            connect_timeout,
        }
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
        let connect_timeout = self.connect_timeout;
        Box::pin(
            async move { connect_to_allowed_address(&allow, connect_timeout, &destination).await },
        )
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
    connect_timeout: Duration,
    destination: &Uri,
) -> io::Result<TokioIo<TcpStream>> {
    let (host, port) = plain_http_host_and_port(destination)?;
    let addresses = allow
        .allowed_addresses(host, port)
        .await
        .map_err(refusal_as_io_error)?;
    let mut failures = Vec::with_capacity(addresses.len());
    for address in addresses {
        match tokio::time::timeout(connect_timeout, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => {
                // hyper may write a request's head and body in two writes; with Nagle's
                // algorithm the second waits for the first one's ACK, which the server
                // may hold back (delayed ACK) for tens of milliseconds.
                stream.set_nodelay(true)?;
                return Ok(TokioIo::new(stream));
            }
            Ok(Err(error)) => failures.push((address, error)),
            Err(_elapsed) => failures.push((
                address,
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no answer within {}",
                        humantime::format_duration(connect_timeout)
                    ),
                ),
            )),
        }
    }
    Err(every_address_failed(destination, failures))
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

/// One error for every address tried, each with why it failed, so that a host with
/// several addresses does not show only the last one's reason.
fn every_address_failed(destination: &Uri, failures: Vec<(SocketAddr, io::Error)>) -> io::Error {
    let kind = failures
        .last()
        .map_or(io::ErrorKind::NotConnected, |(_, error)| error.kind());
    let reasons: Vec<String> = failures
        .iter()
        .map(|(address, error)| format!("{address}: {error}"))
        .collect();
    io::Error::new(
        kind,
        format!(
            "could not connect to {destination} ({})",
            reasons.join("; ")
        ),
    )
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
        // Long enough never to fire here: a test that dials something unreachable would
        // hang, not pass.
        AllowedConnector::new(Arc::new(allow), Duration::from_secs(60))
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
}
