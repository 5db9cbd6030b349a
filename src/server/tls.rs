//! TLS on the TCP listener, with a certificate that can change while tickd runs.
//!
//! tonic's own TLS (`ServerTlsConfig`) is fixed once the server is built. tickd instead
//! completes the handshake itself, on each connection its accept loop hands over, with the
//! rustls configuration current at that moment ([`ReloadableTls`]): a reload (see
//! [`super::reload`]) swaps the configuration for the handshakes to come, while connections
//! already open keep the one they started with. The client CA of mutual TLS is reloaded
//! with the certificate and key.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tracing::debug;

use super::connections::Connection;
use super::reload::Reloadable;
use crate::config::Config;
use crate::metrics::connections::CloseReason;
use crate::metrics::Metrics;
use crate::pem::{roots_from_pem, RootsError};

/// The files `--tls-cert`, `--tls-key` and `--tls-client-ca` name.
#[derive(Debug, Clone)]
struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
}

/// The rustls configuration new TLS connections are accepted with, replaced whole by a
/// reload that succeeds.
pub(crate) struct ReloadableTls {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
}

impl ReloadableTls {
    /// The configuration from the files the flags name, or None without `--tls-cert`.
    /// What is wrong with them is said naming the flag and the file.
    pub(crate) fn load(config: &Config) -> Result<Option<Arc<Self>>, String> {
        let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) else {
            return Ok(None);
        };
        let files = TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: config.tls_client_ca.clone(),
        };
        let contents = super::reload::read_files(&files_of(&files))?;
        let server_config = server_config(&files, &contents)?;
        Ok(Some(Arc::new(Self {
            files,
            current: RwLock::new(Arc::new(server_config)),
        })))
    }

    fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.read().expect("tls config lock").clone())
    }
}

fn files_of(files: &TlsFiles) -> Vec<PathBuf> {
    let mut paths = vec![files.cert.clone(), files.key.clone()];
    paths.extend(files.client_ca.clone());
    paths
}

impl Reloadable for ReloadableTls {
    fn what(&self) -> &'static str {
        "tls certificate"
    }

    fn files(&self) -> Vec<PathBuf> {
        files_of(&self.files)
    }

    fn replace(&self, contents: &[Vec<u8>]) -> Result<String, String> {
        let server_config = server_config(&self.files, contents)?;
        *self.current.write().expect("tls config lock") = Arc::new(server_config);
        Ok(format!("{}", self.files.cert.display()))
    }
}

/// A rustls server configuration from the PEM `contents` of the cert, key and (if any)
/// client CA files, in that order; ALPN offers HTTP/2 alone, as gRPC needs.
fn server_config(files: &TlsFiles, contents: &[Vec<u8>]) -> Result<ServerConfig, String> {
    let [cert_pem, key_pem, rest @ ..] = contents else {
        return Err("the certificate and key files were not read".to_owned());
    };
    let cert_chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("--tls-cert {}: {error}", files.cert.display()))?;
    if cert_chain.is_empty() {
        return Err(format!(
            "--tls-cert {}: no PEM certificate in it",
            files.cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|error| format!("--tls-key {}: {error}", files.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("configuring TLS: {error}"))?;
    let builder = match (&files.client_ca, rest.first()) {
        (Some(path), Some(ca_pem)) => {
            let shown = path.display();
            let roots = roots_from_pem(ca_pem).map_err(|error| match error {
                RootsError::Unreadable(error) => format!("--tls-client-ca {shown}: {error}"),
                RootsError::NoUsableCertificate => {
                    format!("--tls-client-ca {shown}: no usable PEM certificate in it")
                }
            })?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|error| format!("--tls-client-ca {shown}: {error}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    // Also refuses a key that is not the certificate's (one file replaced, not the other).
    let mut server_config = builder.with_single_cert(cert_chain, key).map_err(|error| {
        format!(
            "--tls-cert {} with --tls-key {}: {error}",
            files.cert.display(),
            files.key.display()
        )
    })?;
    server_config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(server_config)
}

/// The connections of `plain` once their TLS handshake is done, for tonic's
/// `serve_with_incoming`. Each handshake runs in a task of its own, for at most
/// `handshake_timeout`, with the configuration current when it starts; one that fails or
/// times out closes its connection (tonic does the same with its own TLS).
pub(crate) fn tls_incoming<S>(
    mut plain: ReceiverStream<io::Result<Connection<S>>>,
    tls: Arc<ReloadableTls>,
    handshake_timeout: Duration,
    metrics: Arc<Metrics>,
) -> ReceiverStream<io::Result<TlsStream<Connection<S>>>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (ready, incoming) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let connection = tokio::select! {
                next = plain.next() => match next {
                    Some(Ok(connection)) => connection,
                    Some(Err(error)) => {
                        let _ = ready.send(Err(error)).await;
                        continue;
                    }
                    None => return,
                },
                () = ready.closed() => return,
            };
            let (acceptor, ready, metrics) = (tls.acceptor(), ready.clone(), metrics.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(handshake_timeout, acceptor.accept(connection)).await {
                    Ok(Ok(stream)) => {
                        let _ = ready.send(Ok(stream)).await;
                    }
                    Ok(Err(error)) => debug!(%error, "tls handshake failed"),
                    Err(_) => metrics.connections.closed(CloseReason::HandshakeTimeout),
                }
            });
        }
    });
    ReceiverStream::new(incoming)
}
