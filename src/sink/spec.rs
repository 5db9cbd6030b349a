//! A sink as configured: `--sink NAMESPACE=URL` read into the namespace and where its
//! expirations go. What the URL carries beyond an address stays out of anything shown:
//! its user and password become each push's credentials (HTTP Basic, or the broker's own
//! authentication) and are never logged.
//!
//! The URL's scheme picks the transport; each transport reads its own URLs in its own
//! file (`http_target` here, [`super::nats::nats_target`], [`super::redis::redis_target`]).

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use hyper::header::HeaderValue;
use hyper::Uri;

use super::body::BodyFormat;
use super::nats::{nats_target, NatsTarget};
use super::redis::{redis_target, RedisTarget};
use crate::convert::Limits;

/// One namespace's sink (`--sink NAMESPACE=URL`).
#[derive(Clone)]
pub struct SinkSpec {
    pub(crate) namespace: String,
    pub(crate) target: SinkTarget,
}

/// Where a sink's pushes go, by the URL's scheme. Each transport reads its own URLs and
/// has its own client in [`super::client::SinkClient`].
#[derive(Clone)]
pub(crate) enum SinkTarget {
    /// `http://` and `https://`: a POST per expiration.
    Http(HttpTarget),
    /// `grpc://` and `grpcs://`: a `tickd.v1.Sink/Deliver` call per expiration.
    Grpc(GrpcTarget),
    /// `nats://`: a JetStream publish per expiration, acknowledged by its PubAck.
    Nats(NatsTarget),
    /// `redis://`: an XADD to a stream per expiration.
    Redis(RedisTarget),
}

impl SinkTarget {
    /// Reads a sink's URL, dispatching on its scheme.
    pub(crate) fn parse(url: &str) -> Result<Self, String> {
        // A URL holds no raw whitespace (RFC 3986); the store keeps settings after one.
        if url.contains(char::is_whitespace) {
            return Err("a URL holds no whitespace: percent-encode it (%20)".into());
        }
        let Some((scheme, _)) = url.split_once("://") else {
            return Err("give the scheme, as in http://127.0.0.1:8080/timers".into());
        };
        match scheme {
            "http" | "https" => http_target(url).map(SinkTarget::Http),
            "grpc" | "grpcs" => GrpcTarget::parse(url).map(SinkTarget::Grpc),
            "nats" => nats_target(url).map(SinkTarget::Nats),
            "redis" => redis_target(url).map(SinkTarget::Redis),
            scheme => Err(format!(
                "tickd pushes to http://, https://, grpc://, grpcs://, nats:// and redis:// \
                 sinks; {scheme}:// is not one of them"
            )),
        }
    }

    /// The host each connection is made to (checked against `--sink-allow`).
    pub(crate) fn host(&self) -> &str {
        match self {
            SinkTarget::Http(target) => target.host(),
            SinkTarget::Grpc(target) => &target.host,
            SinkTarget::Nats(target) => &target.broker.host,
            SinkTarget::Redis(target) => &target.broker.host,
        }
    }

    pub(crate) fn port(&self) -> u16 {
        match self {
            SinkTarget::Http(target) => target.port(),
            SinkTarget::Grpc(target) => target.port,
            SinkTarget::Nats(target) => target.broker.port,
            SinkTarget::Redis(target) => target.broker.port,
        }
    }

    /// Whether its connections are made over TLS (`https://`, `grpcs://`).
    pub(crate) fn uses_tls(&self) -> bool {
        match self {
            SinkTarget::Http(target) => target.uses_tls(),
            SinkTarget::Grpc(target) => target.tls,
            SinkTarget::Nats(_) | SinkTarget::Redis(_) => false,
        }
    }
}

/// The URL as it may be shown: no credentials.
impl fmt::Display for SinkTarget {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SinkTarget::Http(target) => target.fmt(formatter),
            SinkTarget::Grpc(target) => target.fmt(formatter),
            SinkTarget::Nats(target) => target.broker.fmt(formatter),
            SinkTarget::Redis(target) => target.broker.fmt(formatter),
        }
    }
}

/// An HTTP endpoint that takes one expiration per POST.
#[derive(Clone)]
pub(crate) struct HttpTarget {
    /// The URL without its credentials (and without its fragment, which names the body).
    pub(crate) uri: Uri,
    pub(crate) body: BodyFormat,
    /// `#h2c`: HTTP/2 without TLS, every push a stream on one connection.
    pub(crate) h2c: bool,
    /// `Basic ...`, from the URL's `user:password@`: made once, marked sensitive (never
    /// shown by `Debug`, never indexed by HPACK).
    pub(crate) authorization: Option<HeaderValue>,
}

impl HttpTarget {
    pub(crate) fn host(&self) -> &str {
        self.uri.host().unwrap_or_default()
    }

    pub(crate) fn port(&self) -> u16 {
        self.uri
            .port_u16()
            .unwrap_or(if self.uses_tls() { 443 } else { 80 })
    }

    pub(crate) fn uses_tls(&self) -> bool {
        self.uri.scheme_str() == Some("https")
    }
}

/// A gRPC server implementing `tickd.v1.Sink` (proto/tickd/v1/sink.proto).
#[derive(Clone, Debug)]
pub(crate) struct GrpcTarget {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// `grpcs://`: over TLS.
    pub(crate) tls: bool,
}

impl GrpcTarget {
    /// `grpc://host[:port]` or `grpcs://host[:port]` (80 and 443 by default); a path or
    /// credentials are refused (a token goes in --sink-token-file).
    fn parse(url: &str) -> Result<Self, String> {
        let uri = Uri::from_str(url).map_err(|error| format!("not a URL: {error}"))?;
        let tls = uri.scheme_str() == Some("grpcs");
        let authority = uri
            .authority()
            .ok_or_else(|| "give a host, as in grpc://127.0.0.1:50052".to_owned())?;
        if authority.as_str().contains('@') {
            return Err(
                "a grpc:// sink takes no credentials in its URL: give --sink-token-file".into(),
            );
        }
        if authority.host().is_empty() {
            return Err("the host is empty".into());
        }
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() || url.contains('#') {
            return Err(
                "a grpc:// sink is a host and port only: tickd calls tickd.v1.Sink/Deliver".into(),
            );
        }
        Ok(GrpcTarget {
            host: authority.host().to_owned(),
            port: authority.port_u16().unwrap_or(if tls { 443 } else { 80 }),
            tls,
        })
    }
}

impl fmt::Display for GrpcTarget {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "grpcs" } else { "grpc" };
        write!(formatter, "{scheme}://{}:{}", self.host, self.port)
    }
}

/// The URL as it may be shown: no credentials.
impl fmt::Display for HttpTarget {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}", self.uri)?;
        match (self.body, self.h2c) {
            (BodyFormat::Json, false) => Ok(()),
            (BodyFormat::Json, true) => write!(formatter, "#h2c"),
            (BodyFormat::Protobuf, false) => write!(formatter, "#protobuf"),
            (BodyFormat::Protobuf, true) => write!(formatter, "#protobuf,h2c"),
        }
    }
}

impl fmt::Debug for SinkSpec {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}={}", self.namespace, self.target)
    }
}

impl FromStr for SinkSpec {
    type Err = String;

    /// `NAMESPACE=URL`; each refusal quotes the flag's value (its credentials masked) and
    /// says what is wrong with it.
    fn from_str(text: &str) -> Result<Self, String> {
        let refuse = |why: String| format!("--sink {:?}: {why}", masked(text));
        let (namespace, url) = text
            .split_once('=')
            .ok_or_else(|| refuse("give NAMESPACE=URL".into()))?;
        if namespace.is_empty() {
            return Err(refuse("the namespace is empty".into()));
        }
        let namespace = Limits::default()
            .namespace(namespace)
            .map_err(|error| refuse(error.to_string()))?;
        let target = SinkTarget::parse(url).map_err(refuse)?;
        Ok(SinkSpec { namespace, target })
    }
}

/// One `--sink` value: a sink, or several separated by commas. A comma starts another
/// sink only where `NAMESPACE=SCHEME://` follows it, so a URL may hold commas itself
/// (in its path or query) and is never cut in two.
#[derive(Clone, Debug)]
pub struct SinkSpecs(pub Vec<SinkSpec>);

impl FromStr for SinkSpecs {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let mut starts = vec![0];
        for (comma, _) in text.match_indices(',') {
            if starts_a_sink(&text[comma + 1..]) {
                starts.push(comma + 1);
            }
        }
        starts
            .iter()
            .enumerate()
            .map(|(index, &start)| {
                let end = starts.get(index + 1).map_or(text.len(), |next| next - 1);
                text[start..end].parse()
            })
            .collect::<Result<_, _>>()
            .map(SinkSpecs)
    }
}

/// Whether `text` opens with `NAMESPACE=SCHEME://`.
fn starts_a_sink(text: &str) -> bool {
    let Some((namespace, url)) = text.split_once('=') else {
        return false;
    };
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    !namespace.is_empty()
        && !namespace.contains([',', '/', '?', '#'])
        && !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

fn http_target(url: &str) -> Result<HttpTarget, String> {
    let (url, body, h2c) = http_fragment(url)?;
    let uri = Uri::from_str(url).map_err(|error| format!("not a URL: {error}"))?;
    if h2c && uri.scheme_str() == Some("https") {
        return Err(
            "#h2c is HTTP/2 without TLS: an https:// sink speaks HTTP/2 when its \
             server offers it in the TLS handshake (ALPN)"
                .into(),
        );
    }
    let authority = uri
        .authority()
        .ok_or_else(|| "give a host, as in http://127.0.0.1:8080/timers".to_owned())?;
    if authority.host().is_empty() {
        return Err("the host is empty".into());
    }
    let (credentials, host_and_port) = match authority.as_str().rsplit_once('@') {
        Some((credentials, rest)) => (Some(credentials), rest),
        None => (None, authority.as_str()),
    };
    let authorization = credentials.map(|credentials| {
        let decoded = percent_encoding::percent_decode_str(credentials).decode_utf8_lossy();
        let encoded = base64::engine::general_purpose::STANDARD.encode(decoded.as_bytes());
        let mut value = HeaderValue::try_from(format!("Basic {encoded}"))
            .expect("base64 is always a valid header value");
        value.set_sensitive(true);
        value
    });
    let path = uri.path_and_query().map_or("/", |path| path.as_str());
    let uri = Uri::builder()
        .scheme(uri.scheme_str().unwrap_or("http"))
        .authority(host_and_port)
        .path_and_query(path)
        .build()
        .map_err(|error| format!("not a URL: {error}"))?;
    Ok(HttpTarget {
        uri,
        body,
        h2c,
        authorization,
    })
}

/// An HTTP URL without its fragment, and the options the fragment gives, separated by
/// commas: a body format (`json`, the default, or `protobuf`), and `h2c` for HTTP/2 with
/// prior knowledge (no TLS, no upgrade).
fn http_fragment(url: &str) -> Result<(&str, BodyFormat, bool), String> {
    let Some((url, fragment)) = url.split_once('#') else {
        return Ok((url, BodyFormat::Json, false));
    };
    let (mut body, mut h2c) = (None, false);
    for option in fragment.split(',') {
        match (option, BodyFormat::named(option)) {
            ("h2c", _) if !h2c => h2c = true,
            (_, Some(format)) if body.is_none() => body = Some(format),
            // Not echoed: a raw `#` in a password would show the rest of it.
            _ => {
                return Err(
                    "the URL's #fragment is a body format (#json, the default, or \
                     #protobuf) and, for HTTP/2 without TLS, h2c: as in #protobuf,h2c"
                        .into(),
                )
            }
        }
    }
    Ok((url, body.unwrap_or(BodyFormat::Json), h2c))
}

/// `text` with any `user:password@` of its URL replaced by `***@`.
pub(crate) fn masked(text: &str) -> String {
    let Some((before, after_scheme)) = text.split_once("://") else {
        return text.to_owned();
    };
    let authority_end = after_scheme.find('/').unwrap_or(after_scheme.len());
    match after_scheme[..authority_end].rfind('@') {
        Some(at) => format!("{before}://***{}", &after_scheme[at..]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The HTTP target of a sink the test gave an http:// URL.
    fn http(spec: &SinkSpec) -> &HttpTarget {
        let SinkTarget::Http(target) = &spec.target else {
            panic!("{spec:?} is not an HTTP sink");
        };
        target
    }

    #[test]
    fn a_sink_is_a_namespace_and_an_http_url() {
        let spec: SinkSpec = "billing=http://127.0.0.1:8080/timers?x=1".parse().unwrap();
        assert_eq!(spec.namespace, "billing");
        assert_eq!(http(&spec).uri, "http://127.0.0.1:8080/timers?x=1");
        assert_eq!(spec.target.host(), "127.0.0.1");
        assert_eq!(spec.target.port(), 8080);
        assert_eq!(http(&spec).body, BodyFormat::Json);
        assert_eq!(http(&spec).authorization, None);
        let spec: SinkSpec = "n=http://localhost/hook#protobuf".parse().unwrap();
        assert_eq!(http(&spec).body, BodyFormat::Protobuf);
        assert_eq!(spec.target.port(), 80);
        assert_eq!(spec.target.to_string(), "http://localhost/hook#protobuf");
        assert!(!http(&spec).h2c);
    }

    #[test]
    fn a_url_with_whitespace_is_refused_by_every_scheme() {
        for url in [
            "http://127.0.0.1/a b",
            "grpc://127.0.0.1:9 paused",
            "nats://127.0.0.1/s\tx",
        ] {
            let Err(refused) = SinkTarget::parse(url) else {
                panic!("{url} was taken");
            };
            assert!(refused.contains("whitespace"), "{url}: {refused}");
        }
    }

    #[test]
    fn h2c_in_the_fragment_asks_for_http2_without_tls_beside_the_body_format() {
        for (url, body, shown) in [
            ("n=http://localhost/hook#h2c", BodyFormat::Json, "#h2c"),
            (
                "n=http://localhost/hook#protobuf,h2c",
                BodyFormat::Protobuf,
                "#protobuf,h2c",
            ),
            (
                "n=http://localhost/hook#h2c,protobuf",
                BodyFormat::Protobuf,
                "#protobuf,h2c",
            ),
            ("n=http://localhost/hook#json,h2c", BodyFormat::Json, "#h2c"),
        ] {
            let spec: SinkSpec = url.parse().unwrap();
            assert!(http(&spec).h2c, "{url}");
            assert_eq!(http(&spec).body, body, "{url}");
            assert_eq!(
                spec.target.to_string(),
                format!("http://localhost/hook{shown}")
            );
        }
        // Two sinks, the second's fragment holding a comma: still two.
        let specs: SinkSpecs = "a=http://127.0.0.1/#protobuf,h2c,b=http://127.0.0.1/y#h2c"
            .parse()
            .unwrap();
        assert_eq!(specs.0.len(), 2);
        assert!(specs.0.iter().all(|spec| http(spec).h2c));
    }

    #[test]
    fn https_and_grpc_sinks_are_read_with_their_default_ports() {
        let spec: SinkSpec = "n=https://hooks.example/t".parse().unwrap();
        assert_eq!(http(&spec).uri, "https://hooks.example/t");
        assert_eq!(spec.target.port(), 443);
        assert!(spec.target.uses_tls());
        let spec: SinkSpec = "n=grpc://127.0.0.1:50052".parse().unwrap();
        assert_eq!(
            (spec.target.host(), spec.target.port()),
            ("127.0.0.1", 50052)
        );
        assert!(!spec.target.uses_tls());
        assert_eq!(spec.target.to_string(), "grpc://127.0.0.1:50052");
        let spec: SinkSpec = "n=grpcs://app.internal/".parse().unwrap();
        assert_eq!(spec.target.port(), 443);
        assert!(spec.target.uses_tls());
        for (text, expected) in [
            ("n=grpc://127.0.0.1:1/tickd.v1.Sink", "host and port only"),
            ("n=grpc://a:b@127.0.0.1:1", "--sink-token-file"),
        ] {
            let error = text.parse::<SinkSpec>().unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn credentials_become_basic_auth_and_are_never_shown() {
        let spec: SinkSpec = "n=http://app:s%40cret@127.0.0.1:9/hook".parse().unwrap();
        // "app:s@cret" in base64.
        let authorization = http(&spec).authorization.clone().unwrap();
        assert_eq!(authorization, "Basic YXBwOnNAY3JldA==");
        assert!(authorization.is_sensitive());
        let shown = format!("{spec:?} {}", spec.target);
        assert!(!shown.contains("cret"), "{shown}");
        let error = "n=ftp://app:s3cret@host/".parse::<SinkSpec>().unwrap_err();
        assert!(!error.contains("s3cret"), "{error}");
        assert!(error.contains("***@host"), "{error}");
    }

    #[test]
    fn a_comma_separates_sinks_only_before_another_namespace() {
        let specs: SinkSpecs = "a=http://127.0.0.1/x?tags=1,2,b=http://u:p,w@127.0.0.1/y"
            .parse()
            .unwrap();
        let shown: Vec<String> = specs.0.iter().map(|spec| format!("{spec:?}")).collect();
        assert_eq!(
            shown,
            ["a=http://127.0.0.1/x?tags=1,2", "b=http://127.0.0.1/y"]
        );
        let error = "a=http://127.0.0.1/,b=ftp://u:s3cret@h/"
            .parse::<SinkSpecs>()
            .unwrap_err();
        assert!(!error.contains("s3cret"), "{error}");
        assert!(error.contains("ftp://"), "{error}");
    }

    #[test]
    fn malformed_sinks_are_refused_naming_the_flag() {
        for (text, expected) in [
            ("http://127.0.0.1/", "NAMESPACE=URL"),
            ("=http://127.0.0.1/", "namespace is empty"),
            ("n=127.0.0.1:80/x", "scheme"),
            ("n=amqp://127.0.0.1:5672/q", "amqp:// is not one of them"),
            ("n=nats://127.0.0.1:4222", "give the name to push to"),
            ("n=redis://127.0.0.1/s?db=1", "takes no query"),
            (
                "n=redis://127.0.0.1/s#xml",
                "#fragment names no body format",
            ),
            ("n=http://127.0.0.1/#xml", "#fragment is a body format"),
            ("n=http://127.0.0.1/#h2c,h2c", "#fragment is a body format"),
            (
                "n=http://127.0.0.1/#json,protobuf",
                "#fragment is a body format",
            ),
            ("n=https://127.0.0.1/#h2c", "offers it in the TLS handshake"),
            ("n\u{7}=http://127.0.0.1/", "control characters"),
        ] {
            let error = text.parse::<SinkSpec>().unwrap_err();
            assert!(error.starts_with("--sink "), "{error}");
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn broker_urls_name_where_and_what_and_hide_their_credentials() {
        let spec: SinkSpec = "n=nats://127.0.0.1/tickd.expired".parse().unwrap();
        assert_eq!(
            (spec.target.host(), spec.target.port()),
            ("127.0.0.1", 4222)
        );
        assert_eq!(
            spec.target.to_string(),
            "nats://127.0.0.1:4222/tickd.expired"
        );
        let spec: SinkSpec = "n=redis://:s%40cret@[::1]:7000/my%20stream#protobuf"
            .parse()
            .unwrap();
        assert_eq!((spec.target.host(), spec.target.port()), ("[::1]", 7000));
        let SinkTarget::Redis(target) = &spec.target else {
            panic!("{spec:?} is not a Redis sink");
        };
        assert_eq!(target.broker.name, "my stream");
        assert_eq!(target.broker.user.as_deref(), Some(""));
        assert_eq!(target.broker.password.as_deref(), Some("s@cret"));
        assert_eq!(target.broker.body, BodyFormat::Protobuf);
        let shown = format!("{spec:?} {}", spec.target);
        assert!(!shown.contains("cret"), "{shown}");
        assert!(
            shown.contains("redis://[::1]:7000/my%20stream#protobuf"),
            "{shown}"
        );
        let spec: SinkSpec = "n=redis://localhost/s".parse().unwrap();
        assert_eq!(spec.target.port(), 6379);
    }
}
