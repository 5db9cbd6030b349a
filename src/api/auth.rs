//! Bearer-token authentication: each token may use a set of namespaces.
//!
//! The token file has one token per line, `<token> <namespace>[,<namespace>...]`, or
//! `<token> *` for every namespace; `#` starts a comment. Tokens are never logged.
//! Authentication happens in an interceptor (no token or an unknown one:
//! `UNAUTHENTICATED`); authorisation in each handler, which knows the namespaces a call
//! touches (outside the token's set: `PERMISSION_DENIED`). The health service has no
//! interceptor, so Kubernetes probes, which send no metadata, keep working.
//!
//! The tokens can be replaced while tickd runs ([`Authenticator::replace_tokens`], on
//! SIGHUP or a change of the file: see `server::reload`); each call is checked against the
//! set in force when it starts.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, RwLock};

use tonic::{Request, Status};

use crate::domain::TimerError;

/// What a caller may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Grant {
    AllNamespaces,
    Namespaces(Arc<HashSet<String>>),
}

impl Grant {
    pub(crate) fn allows(&self, namespace: &str) -> bool {
        match self {
            Grant::AllNamespaces => true,
            Grant::Namespaces(allowed) => allowed.contains(namespace),
        }
    }

    /// PERMISSION_DENIED unless `namespace` is allowed; `None` means every namespace.
    pub(crate) fn check(&self, namespace: Option<&str>) -> Result<(), TimerError> {
        let allowed = match namespace {
            Some(namespace) => self.allows(namespace),
            None => *self == Grant::AllNamespaces,
        };
        if allowed {
            return Ok(());
        }
        Err(TimerError::PermissionDenied(match namespace {
            Some(namespace) => format!("the token may not use namespace {namespace:?}"),
            None => "listing every namespace needs a token granted `*`".to_owned(),
        }))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} line {line}: expected `<token> <namespace>[,<namespace>...]` or `<token> *`")]
    Malformed { path: String, line: usize },
    /// A file granting nobody is taken for one caught half-written (or a wrong path).
    #[error("{path}: no token in it (a file with no token would refuse every call)")]
    Empty { path: String },
}

/// The tokens a server accepts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tokens {
    grants: HashMap<String, Grant>,
}

impl Tokens {
    pub(crate) fn load(path: &Path) -> Result<Self, TokenFileError> {
        let display = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
            path: display,
            source,
        })?;
        Self::from_file_text(path, &text)
    }

    /// The tokens of the file at `path`, given its text: at least one, every line well formed.
    pub(crate) fn from_file_text(path: &Path, text: &str) -> Result<Self, TokenFileError> {
        let path = path.display().to_string();
        let tokens = Self::parse(text).map_err(|line| TokenFileError::Malformed {
            path: path.clone(),
            line,
        })?;
        if tokens.grants.is_empty() {
            return Err(TokenFileError::Empty { path });
        }
        Ok(tokens)
    }

    pub(crate) fn len(&self) -> usize {
        self.grants.len()
    }

    /// Parses the file's text; the error is the 1-based number of the bad line.
    pub(crate) fn parse(text: &str) -> Result<Self, usize> {
        let mut grants = HashMap::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(token), Some(namespaces), None) =
                (fields.next(), fields.next(), fields.next())
            else {
                return Err(index + 1);
            };
            let grant = if namespaces == "*" {
                Grant::AllNamespaces
            } else {
                let names = namespaces
                    .split(',')
                    .filter(|name| !name.is_empty())
                    .map(str::to_owned)
                    .collect();
                Grant::Namespaces(Arc::new(names))
            };
            grants.insert(token.to_owned(), grant);
        }
        Ok(Self { grants })
    }

    fn grant(&self, token: &str) -> Option<&Grant> {
        self.grants.get(token)
    }
}

/// The interceptor in front of the Timers service. Without tokens configured every call
/// gets [`Grant::AllNamespaces`]. Clones share the tokens, so that one kept by the reload
/// task replaces them for all.
#[derive(Clone, Default)]
pub(crate) struct Authenticator {
    tokens: Option<Arc<RwLock<Arc<Tokens>>>>,
}

impl Authenticator {
    pub(crate) fn new(tokens: Option<Tokens>) -> Self {
        Self {
            tokens: tokens.map(|tokens| Arc::new(RwLock::new(Arc::new(tokens)))),
        }
    }

    /// Puts `tokens` in force for the calls to come; calls in progress keep their grant.
    /// Without tokens configured at start-up there is nothing to replace (false).
    pub(crate) fn replace_tokens(&self, tokens: Tokens) -> bool {
        let Some(current) = &self.tokens else {
            return false;
        };
        *current.write().expect("tokens lock") = Arc::new(tokens);
        true
    }

    fn current(&self) -> Option<Arc<Tokens>> {
        self.tokens
            .as_ref()
            .map(|tokens| tokens.read().expect("tokens lock").clone())
    }
}

impl tonic::service::Interceptor for Authenticator {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let grant = match self.current() {
            None => Grant::AllNamespaces,
            Some(tokens) => {
                let token = request
                    .metadata()
                    .get("authorization")
                    .and_then(|value| value.to_str().ok())
                    .and_then(|value| value.strip_prefix("Bearer "))
                    .ok_or_else(|| {
                        Status::unauthenticated("missing `authorization: Bearer <token>`")
                    })?;
                tokens
                    .grant(token.trim())
                    .cloned()
                    .ok_or_else(|| Status::unauthenticated("unknown token"))?
            }
        };
        request.extensions_mut().insert(grant);
        Ok(request)
    }
}

/// The grant the interceptor attached to a request; none at all allows nothing.
pub(crate) fn grant_of<T>(request: &Request<T>) -> Grant {
    request
        .extensions()
        .get::<Grant>()
        .cloned()
        .unwrap_or_else(|| Grant::Namespaces(Arc::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_grants_and_rejects_malformed_lines() {
        let tokens = Tokens::parse("# ops\nadmin-token *\nteam-a orders,payments # two\n").unwrap();
        assert_eq!(tokens.grant("admin-token"), Some(&Grant::AllNamespaces));
        let team = tokens.grant("team-a").unwrap();
        assert!(team.allows("orders") && team.allows("payments") && !team.allows("other"));
        assert!(tokens.grant("nobody").is_none());
        assert_eq!(Tokens::parse("lonely-token\n").unwrap_err(), 1);
        assert_eq!(Tokens::parse("ok *\na b c\n").unwrap_err(), 2);
    }

    #[test]
    fn a_file_without_tokens_is_refused() {
        let path = Path::new("/etc/tickd/tokens");
        let error = Tokens::from_file_text(path, "# all gone\n\n").unwrap_err();
        assert!(matches!(error, TokenFileError::Empty { .. }), "{error}");
        assert!(error.to_string().contains("/etc/tickd/tokens"), "{error}");
        assert_eq!(Tokens::from_file_text(path, "a *\n").unwrap().len(), 1);
    }

    #[test]
    fn replaced_tokens_apply_to_every_clone() {
        use tonic::service::Interceptor;
        let authenticator = Authenticator::new(Some(Tokens::parse("old *").unwrap()));
        let mut clone = authenticator.clone();
        let call = |token: &str| {
            let mut request = Request::new(());
            let value = format!("Bearer {token}").parse().unwrap();
            request.metadata_mut().insert("authorization", value);
            request
        };
        assert!(clone.call(call("old")).is_ok());
        assert!(authenticator.replace_tokens(Tokens::parse("new *").unwrap()));
        assert!(clone.call(call("new")).is_ok());
        let refused = clone.call(call("old")).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
        assert!(!Authenticator::new(None).replace_tokens(Tokens::default()));
    }
}
