//! Reaching tickd: the global connection flags (`--endpoint`, `--token*`, `--tls-*`,
//! `--timeout`), the bearer-token interceptor, and dialing TCP (plaintext or TLS) or a Unix
//! socket eagerly, so that an unreachable server is reported (exit 3) before any call.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Status};

use crate::failure::{one_line, Failure};
use crate::values::duration;

/// The global flags that say where tickd is and how to authenticate to it. Every
/// subcommand's `--help` lists them under their own heading, apart from its own flags.
#[derive(Debug, Args)]
#[command(next_help_heading = "Connection options")]
pub(crate) struct Connection {
    /// tickd's gRPC endpoint: `HOST:PORT`, `http://HOST:PORT`, `https://HOST:PORT` or `unix:PATH`.
    #[arg(
        long,
        global = true,
        env = "TICKCTL_ENDPOINT",
        default_value = "http://127.0.0.1:50051"
    )]
    endpoint: String,

    /// Bearer token sent with every call (`authorization: Bearer TOKEN`).
    #[arg(
        long,
        global = true,
        env = "TICKCTL_TOKEN",
        conflicts_with = "token_file",
        hide_env_values = true
    )]
    token: Option<String>,

    /// Read the bearer token from this file (surrounding whitespace is ignored).
    #[arg(long, global = true, env = "TICKCTL_TOKEN_FILE")]
    token_file: Option<PathBuf>,

    /// PEM CA bundle to verify tickd's certificate with; turns TLS on (as does `https://`).
    #[arg(long, global = true, env = "TICKCTL_TLS_CA", value_name = "PEM")]
    tls_ca: Option<PathBuf>,

    /// PEM client certificate, for tickd servers that require mutual TLS.
    #[arg(
        long,
        global = true,
        env = "TICKCTL_TLS_CERT",
        value_name = "PEM",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(
        long,
        global = true,
        env = "TICKCTL_TLS_KEY",
        value_name = "PEM",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,

    /// Name to verify tickd's certificate against (default: the endpoint's host).
    #[arg(
        long,
        global = true,
        env = "TICKCTL_TLS_SERVER_NAME",
        value_name = "NAME"
    )]
    tls_server_name: Option<String>,

    /// Connection timeout, and deadline of each unary call.
    #[arg(long, global = true, env = "TICKCTL_TIMEOUT", default_value = "10s", value_parser = duration, allow_hyphen_values = true)]
    pub(crate) timeout: Duration,
}

/// Adds `authorization: Bearer TOKEN` to every call when a token is configured.
#[derive(Clone)]
pub(crate) struct BearerTokenInterceptor(Option<MetadataValue<Ascii>>);

impl Interceptor for BearerTokenInterceptor {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

impl BearerTokenInterceptor {
    /// The interceptor for `--token` or `--token-file`; one that adds nothing without either.
    pub(crate) fn from_flags(connection: &Connection) -> Result<Self, Failure> {
        let token = match (&connection.token, &connection.token_file) {
            (Some(token), _) => token.trim().to_owned(),
            (None, Some(path)) => std::fs::read_to_string(path)
                .map_err(|error| {
                    Failure::Usage(format!("reading --token-file {}: {error}", path.display()))
                })?
                .trim()
                .to_owned(),
            (None, None) => return Ok(Self(None)),
        };
        if token.is_empty() {
            return Err(Failure::Usage("the token is empty".into()));
        }
        MetadataValue::try_from(format!("Bearer {token}"))
            .map(|header| Self(Some(header)))
            .map_err(|_| Failure::Usage("the token has characters not allowed in a header".into()))
    }
}

/// Connects eagerly, so an unreachable server is reported before any call is made.
pub(crate) async fn connect(connection: &Connection) -> Result<Channel, Failure> {
    let endpoint = connection.endpoint.as_str();
    let timeout = connection.timeout;
    let connecting = if let Some(socket_path) = endpoint.strip_prefix("unix:") {
        let socket_path = socket_path.strip_prefix("//").unwrap_or(socket_path);
        if socket_path.is_empty() {
            return Err(Failure::Usage(format!(
                "--endpoint {endpoint:?}: no socket path"
            )));
        }
        if tls_config(connection, false)?.is_some() {
            return Err(Failure::Usage(
                "TLS is for TCP endpoints; tickd's Unix socket is plaintext".into(),
            ));
        }
        tokio::time::timeout(timeout, dial_unix_socket(socket_path.to_owned(), timeout)).await
    } else {
        let tcp_endpoint = tcp_endpoint(connection)?;
        tokio::time::timeout(timeout, tcp_endpoint.connect()).await
    };
    match connecting {
        Ok(Ok(channel)) => Ok(channel),
        Ok(Err(error)) => Err(Failure::Unreachable(format!(
            "cannot reach tickd at {endpoint}: {}",
            root_cause(&error)
        ))),
        Err(_) => Err(Failure::Unreachable(format!(
            "cannot reach tickd at {endpoint}: no connection within --timeout {}",
            humantime::format_duration(timeout)
        ))),
    }
}

async fn dial_unix_socket(
    socket_path: String,
    timeout: Duration,
) -> Result<Channel, tonic::transport::Error> {
    // The URI is a placeholder: the connector dials the socket.
    let endpoint = Endpoint::from_static("http://tickd.sock").connect_timeout(timeout);
    endpoint
        .connect_with_connector(tower::service_fn(move |_| {
            let socket_path = socket_path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket_path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
}

/// The TCP endpoint to dial: `HOST:PORT` gets `https://` when a TLS flag is given, else
/// `http://`; an explicit `http://` with TLS flags is refused rather than silently ignored.
fn tcp_endpoint(connection: &Connection) -> Result<Endpoint, Failure> {
    let endpoint = connection.endpoint.as_str();
    let explicit_http = endpoint.starts_with("http://");
    let https = endpoint.starts_with("https://");
    let tls = tls_config(connection, https)?;
    if explicit_http && tls.is_some() {
        return Err(Failure::Usage(format!(
            "--endpoint {endpoint:?} is plaintext; use https:// (or HOST:PORT) with the --tls-* flags"
        )));
    }
    let url = if endpoint.contains("://") {
        endpoint.to_owned()
    } else if tls.is_some() {
        format!("https://{endpoint}")
    } else {
        format!("http://{endpoint}")
    };
    let mut parsed = Endpoint::from_shared(url)
        .map_err(|error| Failure::Usage(format!("--endpoint {endpoint:?}: {error}")))?
        .connect_timeout(connection.timeout);
    if let Some(tls) = tls {
        parsed = parsed
            .tls_config(tls)
            .map_err(|error| Failure::Usage(format!("TLS settings: {}", root_cause(&error))))?;
    }
    Ok(parsed)
}

/// The client TLS settings, or None for plaintext; `https://` needs `--tls-ca` (this build
/// carries no system trust roots).
fn tls_config(connection: &Connection, https: bool) -> Result<Option<ClientTlsConfig>, Failure> {
    let wanted = https
        || connection.tls_ca.is_some()
        || connection.tls_cert.is_some()
        || connection.tls_server_name.is_some();
    if !wanted {
        return Ok(None);
    }
    let Some(ca) = &connection.tls_ca else {
        return Err(Failure::Usage(
            "TLS needs --tls-ca (the CA that signed tickd's certificate)".into(),
        ));
    };
    let mut tls =
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read_pem("--tls-ca", ca)?));
    if let (Some(cert), Some(key)) = (&connection.tls_cert, &connection.tls_key) {
        tls = tls.identity(Identity::from_pem(
            read_pem("--tls-cert", cert)?,
            read_pem("--tls-key", key)?,
        ));
    }
    if let Some(name) = &connection.tls_server_name {
        tls = tls.domain_name(name.clone());
    }
    Ok(Some(tls))
}

/// Reads a PEM file named by a TLS flag.
fn read_pem(flag: &str, path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path)
        .map_err(|error| Failure::Usage(format!("reading {flag} {}: {error}", path.display())))
}

/// The innermost cause of an error: "connection refused" rather than "transport error".
fn root_cause(error: &dyn std::error::Error) -> String {
    let mut innermost = error;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    one_line(&innermost.to_string())
}
