//! A message broker's sink URL, `SCHEME://[USER[:PASSWORD]@]HOST[:PORT]/NAME`, read the
//! same way for NATS and Redis: where to connect, with what credentials (never shown), and
//! the one subject or stream each push goes to.

use std::fmt;
use std::str::FromStr;

use hyper::Uri;

use super::body::{body_format, BodyFormat};

/// A broker's URL, `SCHEME://[USER[:PASSWORD]@]HOST[:PORT]/NAME[#protobuf]`, as the
/// NATS and Redis sinks read it: where to connect, with what credentials, and the one
/// name (a subject, a stream) each push goes to.
#[derive(Clone)]
pub(crate) struct BrokerUrl {
    pub(crate) scheme: &'static str,
    /// As the URL gives it (an IPv6 literal in brackets), checked by `--sink-allow`.
    pub(crate) host: String,
    pub(crate) port: u16,
    /// User and password, percent-decoded; never shown.
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
    /// The path without its leading `/`, percent-decoded.
    pub(crate) name: String,
    pub(crate) body: BodyFormat,
}

impl BrokerUrl {
    /// Reads `url`, whose scheme is `scheme`; `example` ends each refusal that needs one.
    pub(crate) fn parse(
        url: &str,
        scheme: &'static str,
        default_port: u16,
        example: &str,
    ) -> Result<BrokerUrl, String> {
        let (url, body) = body_format(url)?;
        let uri = Uri::from_str(url).map_err(|error| format!("not a URL: {error}"))?;
        let authority = uri
            .authority()
            .ok_or_else(|| format!("give a host, as in {example}"))?;
        if authority.host().is_empty() {
            return Err("the host is empty".into());
        }
        if uri.query().is_some() {
            return Err(format!(
                "a {scheme}:// sink takes no query, as in {example}"
            ));
        }
        let decode = |text: &str| {
            percent_encoding::percent_decode_str(text)
                .decode_utf8()
                .map(|decoded| decoded.into_owned())
                .map_err(|_| "a percent-encoded part of the URL is not UTF-8".to_owned())
        };
        let (user, password) = match authority.as_str().rsplit_once('@') {
            None => (None, None),
            Some((credentials, _)) => match credentials.split_once(':') {
                Some((user, password)) => (Some(decode(user)?), Some(decode(password)?)),
                None => (Some(decode(credentials)?), None),
            },
        };
        let name = decode(uri.path().strip_prefix('/').unwrap_or_default())?;
        if name.is_empty() {
            return Err(format!(
                "give the name to push to after the host, as in {example}"
            ));
        }
        Ok(BrokerUrl {
            scheme,
            host: authority.host().to_owned(),
            port: authority.port_u16().unwrap_or(default_port),
            user,
            password,
            name,
            body,
        })
    }
}

/// The URL as it may be shown: no credentials.
impl fmt::Display for BrokerUrl {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = percent_encoding::utf8_percent_encode(&self.name, NAME_ESCAPES);
        write!(
            formatter,
            "{}://{}:{}/{name}",
            self.scheme, self.host, self.port
        )?;
        if self.body == BodyFormat::Protobuf {
            write!(formatter, "#protobuf")?;
        }
        Ok(())
    }
}

/// Escaped in a broker URL's name as shown: what a URL's path cannot hold as it is.
const NAME_ESCAPES: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'%')
    .add(b'#')
    .add(b'?')
    .add(b'"');
