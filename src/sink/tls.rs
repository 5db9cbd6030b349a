//! What a sink's connections carry beyond an address: TLS for `https://` and `grpcs://`
//! sinks, and a bearer token for every sink.
//!
//! TLS is rustls on the ring provider. A sink's certificate must chain to the system's
//! roots (read once at start-up from the operating system's store) or to `--sink-ca`; its
//! name is the URL's host (SNI and the check alike). `--sink-client-cert` and
//! `--sink-client-key` give tickd a certificate to present to sinks that ask for one.
//! `--sink-token-file` holds a token sent as `Authorization: Bearer <token>`, read at
//! start-up and again within a second of the file changing (a [`WatchedFile`]).
//!
//! The handshake is made in [`SinkConnector`], over [`AllowedConnector`]: the address is
//! checked against `--sink-allow` first, on the resolved address, whatever the scheme.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::header::HeaderValue;
use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use tracing::warn;

use super::allow::SinkAllow;
use super::connect::{AllowedConnector, CONNECT_TIMEOUT};
use super::signing::Signing;
use super::watched_file::WatchedFile;
use super::{SinkConfig, SinkError};
use crate::pem::{roots_from_pem, RootsError};

/// The TLS configuration and the token every sink shares, and the secrets each
/// namespace's pushes are signed with, loaded at start-up.
pub(crate) struct SinkSecurity {
    /// Without ALPN; each transport adds its own ([`SinkSecurity::tls_for`]).
    tls: Option<Arc<ClientConfig>>,
    token: Option<TokenFile>,
    /// `--sink-secret-file`, by namespace.
    signing: BTreeMap<String, Arc<Signing>>,
}

impl SinkSecurity {
    /// Reads `--sink-ca`, the client certificate and key, the token file and the secret
    /// files, refusing any that cannot be read or used, the message naming its flag. TLS
    /// is set up only when a sink uses it or a TLS flag is given.
    pub(crate) fn load(config: &SinkConfig) -> Result<SinkSecurity, SinkError> {
        let refuse = SinkError::Configuration;
        let token = match &config.token_file {
            Some(path) => Some(read_token_file(path).map_err(refuse)?),
            None => None,
        };
        let wanted = config.sinks.iter().any(|sink| sink.target.uses_tls())
            || config.ca_file.is_some()
            || config.client_cert.is_some();
        let tls = if wanted {
            Some(Arc::new(client_config(config).map_err(refuse)?))
        } else {
            None
        };
        let mut signing = BTreeMap::new();
        for (namespace, path) in &config.secret_files {
            let read = Arc::new(Signing::read(path).map_err(refuse)?);
            if signing.insert(namespace.clone(), read).is_some() {
                return Err(refuse(format!(
                    "--sink-secret-file: namespace {namespace:?} is given two secret files; \
                     give both secrets in one file (one per line) to sign with both"
                )));
            }
        }
        Ok(SinkSecurity {
            tls,
            token,
            signing,
        })
    }

    /// What `namespace`'s pushes are signed with, if `--sink-secret-file` gives it.
    pub(crate) fn signing_for(&self, namespace: &str) -> Option<Arc<Signing>> {
        self.signing.get(namespace).cloned()
    }

    /// The TLS configuration for a transport offering `alpn` (`h2`, `http/1.1`), in its
    /// order of preference.
    pub(crate) fn tls_for(&self, alpn: &[&[u8]]) -> Option<Arc<ClientConfig>> {
        self.tls.as_ref().map(|base| {
            let mut config = ClientConfig::clone(base);
            config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
            Arc::new(config)
        })
    }

    /// `Bearer <token>`, as the token file held it when last looked at (at most
    /// `watched_file::LOOKED_AT_EVERY` ago); marked sensitive, never indexed by HPACK.
    pub(crate) fn authorization(&self) -> Option<HeaderValue> {
        self.token
            .as_ref()
            .map(|token| HeaderValue::clone(&token.current()))
    }
}

/// `--sink-token-file`: its trimmed contents as `Bearer <token>`, read again when the file
/// changes (see [`WatchedFile`]).
type TokenFile = WatchedFile<HeaderValue>;

const TOKEN_FLAG: &str = "--sink-token-file";

fn read_token_file(path: &Path) -> Result<TokenFile, String> {
    WatchedFile::read(TOKEN_FLAG, path, parse_token)
}

fn parse_token(flag: &str, path: &Path, contents: &str) -> Result<HeaderValue, String> {
    let shown = path.display();
    let token = contents.trim();
    if token.is_empty() {
        return Err(format!("{flag} {shown}: the file is empty"));
    }
    let printable = |c: char| c.is_ascii() && !c.is_ascii_control();
    let Some(mut authorization) = token
        .chars()
        .all(printable)
        .then(|| HeaderValue::try_from(format!("Bearer {token}")).ok())
        .flatten()
    else {
        return Err(format!(
            "{flag} {shown}: a token is one line of printable ASCII"
        ));
    };
    authorization.set_sensitive(true);
    Ok(authorization)
}

/// The roots (the system's and `--sink-ca`'s) and the client certificate, if any.
fn client_config(config: &SinkConfig) -> Result<ClientConfig, String> {
    let mut roots = system_roots();
    if let Some(path) = &config.ca_file {
        let shown = path.display();
        let pem = std::fs::read(path).map_err(|error| format!("--sink-ca {shown}: {error}"))?;
        let extra = roots_from_pem(&pem).map_err(|error| match error {
            RootsError::Unreadable(error) => format!("--sink-ca {shown}: {error}"),
            RootsError::NoUsableCertificate => {
                format!("--sink-ca {shown}: no usable PEM certificate in it")
            }
        })?;
        roots.roots.extend(extra.roots);
    }
    if roots.is_empty() {
        warn!(
            "no trusted roots for https:// and grpcs:// sinks: the system has none; give --sink-ca"
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("configuring TLS for sinks: {error}"))?
        .with_root_certificates(roots);
    match (&config.client_cert, &config.client_key) {
        (Some(cert), Some(key)) => {
            let chain = std::fs::read(cert)
                .map_err(|error| error.to_string())
                .and_then(|pem| {
                    CertificateDer::pem_slice_iter(&pem)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|error| error.to_string())
                })
                .and_then(|chain| match chain.is_empty() {
                    true => Err("no PEM certificate in it".to_owned()),
                    false => Ok(chain),
                })
                .map_err(|error| format!("--sink-client-cert {}: {error}", cert.display()))?;
            let key = std::fs::read(key)
                .map_err(|error| error.to_string())
                .and_then(|pem| {
                    PrivateKeyDer::from_pem_slice(&pem).map_err(|error| error.to_string())
                })
                .map_err(|error| format!("--sink-client-key {}: {error}", key.display()))?;
            builder.with_client_auth_cert(chain, key).map_err(|error| {
                format!(
                    "--sink-client-cert {} with --sink-client-key: {error}",
                    cert.display()
                )
            })
        }
        (None, None) => Ok(builder.with_no_client_auth()),
        _ => Err("give --sink-client-cert and --sink-client-key together".to_owned()),
    }
}

/// The operating system's trusted roots; what cannot be read is warned about, not fatal
/// (`--sink-ca` may be all a deployment needs).
fn system_roots() -> RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        warn!(%error, "reading the system's trusted roots for sinks");
    }
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    roots
}

/// A sink's connector: [`AllowedConnector`] (the `--sink-allow` check, TCP), then TLS if
/// the sink uses it, whatever the URL's scheme says (a gRPC channel asks for `http://`).
#[derive(Clone)]
pub(crate) struct SinkConnector {
    allowed: AllowedConnector,
    tls: Option<TlsConnector>,
}

impl SinkConnector {
    /// Dials only what `allow` allows; with `tls`, then makes a TLS handshake within
    /// [`CONNECT_TIMEOUT`] of the connection.
    pub(crate) fn new(allow: Arc<SinkAllow>, tls: Option<Arc<ClientConfig>>) -> SinkConnector {
        SinkConnector {
            allowed: AllowedConnector::new(allow),
            tls: tls.map(TlsConnector::from),
        }
    }
}

impl tower::Service<Uri> for SinkConnector {
    type Response = TokioIo<SinkStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<SinkStream>>> + Send>>;

    fn poll_ready(&mut self, _context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, destination: Uri) -> Self::Future {
        let mut allowed = self.allowed.clone();
        let tls = self.tls.clone();
        Box::pin(async move {
            let host = destination.host().unwrap_or_default().to_owned();
            let default_port = if destination.scheme_str() == Some("https") {
                443
            } else {
                80
            };
            let port = destination.port_u16().unwrap_or(default_port);
            // The allowed connector dials plain TCP to `http://` URLs.
            let plain: Uri = format!("http://{host}:{port}/")
                .parse()
                .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
            let stream = tower::Service::call(&mut allowed, plain)
                .await?
                .into_inner();
            let Some(tls) = tls else {
                return Ok(TokioIo::new(SinkStream::Plain(stream)));
            };
            let name = host.trim_start_matches('[').trim_end_matches(']');
            let server_name = ServerName::try_from(name.to_owned()).map_err(|error| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("{host}: {error}"))
            })?;
            let handshake = tokio::time::timeout(CONNECT_TIMEOUT, tls.connect(server_name, stream))
                .await
                .map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("TLS with {host}:{port}: no handshake within {CONNECT_TIMEOUT:?}"),
                    )
                })?;
            let stream = handshake.map_err(|error| {
                io::Error::new(error.kind(), format!("TLS with {host}:{port}: {error}"))
            })?;
            Ok(TokioIo::new(SinkStream::Tls(Box::new(stream))))
        })
    }
}

/// A connection to a sink: plain TCP, or TLS over it.
pub(crate) enum SinkStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for SinkStream {
    /// HTTP/2 when the TLS handshake chose it, so that the client speaks it on this
    /// connection (`#h2c` sinks are told by the client's own setting instead).
    fn connected(&self) -> Connected {
        match self {
            SinkStream::Tls(stream) if stream.get_ref().1.alpn_protocol() == Some(b"h2") => {
                Connected::new().negotiated_h2()
            }
            _ => Connected::new(),
        }
    }
}

impl AsyncRead for SinkStream {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SinkStream::Plain(stream) => Pin::new(stream).poll_read(context, buf),
            SinkStream::Tls(stream) => Pin::new(stream.as_mut()).poll_read(context, buf),
        }
    }
}

impl AsyncWrite for SinkStream {
    fn poll_write(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            SinkStream::Plain(stream) => Pin::new(stream).poll_write(context, buf),
            SinkStream::Tls(stream) => Pin::new(stream.as_mut()).poll_write(context, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SinkStream::Plain(stream) => Pin::new(stream).poll_flush(context),
            SinkStream::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(context),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SinkStream::Plain(stream) => Pin::new(stream).poll_shutdown(context),
            SinkStream::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(context),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            SinkStream::Plain(stream) => Pin::new(stream).poll_write_vectored(context, bufs),
            SinkStream::Tls(stream) => Pin::new(stream.as_mut()).poll_write_vectored(context, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            SinkStream::Plain(stream) => stream.is_write_vectored(),
            SinkStream::Tls(stream) => stream.is_write_vectored(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::watched_file::LOOKED_AT_EVERY;
    use std::time::{Duration, SystemTime};

    #[test]
    fn the_token_is_read_again_when_its_file_changes_and_kept_when_it_goes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").unwrap();
        let token = read_token_file(&path).unwrap();
        let read_at = token.looked_at();
        assert_eq!(*token.current_at(read_at), "Bearer first");
        assert!(token.current_at(read_at).is_sensitive());
        std::fs::write(&path, "  second \n").unwrap();
        // A later modification time, whatever the file system's clock granularity.
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() + Duration::from_secs(10))
            .unwrap();
        let almost = read_at + LOOKED_AT_EVERY - Duration::from_millis(1);
        assert_eq!(
            *token.current_at(almost),
            "Bearer first",
            "not looked at again within a second"
        );
        let next = read_at + LOOKED_AT_EVERY;
        assert_eq!(*token.current_at(next), "Bearer second");
        std::fs::remove_file(&path).unwrap();
        let later = next + LOOKED_AT_EVERY;
        assert_eq!(
            *token.current_at(later),
            "Bearer second",
            "the last token is kept"
        );
    }

    #[test]
    fn an_unusable_token_file_is_refused_naming_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, " \n").unwrap();
        let two_lines = dir.path().join("two-lines");
        std::fs::write(&two_lines, "a\nb\n").unwrap();
        for path in [dir.path().join("missing"), empty, two_lines] {
            let error = read_token_file(&path).err().expect("refused");
            assert!(error.starts_with("--sink-token-file "), "{error}");
            assert!(error.contains(&path.display().to_string()), "{error}");
        }
    }
}
