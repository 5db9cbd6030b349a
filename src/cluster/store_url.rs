//! The `--store` URL: kept out of every printout (it may hold a password), and read for
//! the TLS parameters libpq takes from it that tokio-postgres does not
//! (`sslmode`'s verify modes, `sslrootcert`), which [`super::database::Database::new`]
//! applies itself before handing the rest to tokio-postgres.

use std::borrow::Cow;
use std::fmt;

use percent_encoding::percent_decode_str;

/// The `--store` value as given. It may hold a password, so neither `Debug` (a
/// configuration printed whole) nor anything else here shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl(String);

impl From<String> for StoreUrl {
    fn from(url: String) -> Self {
        Self(url)
    }
}

impl std::ops::Deref for StoreUrl {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StoreUrl(<redacted>)")
    }
}

/// libpq's TLS parameters that tokio-postgres cannot read, taken out of a URL.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TlsParams<'a> {
    /// The URL without them, for tokio-postgres.
    pub(super) rest: Cow<'a, str>,
    pub(super) sslmode: Option<String>,
    pub(super) sslrootcert: Option<String>,
}

impl<'a> TlsParams<'a> {
    /// Splits the query of a `postgres://` or `postgresql://` URL the way tokio-postgres
    /// does (the credentials end at the first `@`, the query begins at the next `?`, its
    /// parameters are `&`-separated and percent-encoded), so that what is left parses as
    /// before. Anything else is left whole. The last of a repeated parameter wins, as in
    /// tokio-postgres.
    pub(super) fn take_from(url: &'a str) -> Result<Self, String> {
        let untouched = || TlsParams {
            rest: Cow::Borrowed(url),
            sslmode: None,
            sslrootcert: None,
        };
        let Some(after_scheme) = ["postgres://", "postgresql://"]
            .iter()
            .find_map(|scheme| url.strip_prefix(scheme))
        else {
            return Ok(untouched());
        };
        let authority =
            url.len() - after_scheme.len() + after_scheme.find('@').map_or(0, |at| at + 1);
        let Some(query) = url[authority..].find('?').map(|at| authority + at) else {
            return Ok(untouched());
        };
        let mut params = TlsParams {
            rest: Cow::Borrowed(""),
            sslmode: None,
            sslrootcert: None,
        };
        let mut kept = Vec::new();
        for pair in url[query + 1..].split('&') {
            let Some((key, value)) = pair.split_once('=') else {
                kept.push(pair);
                continue;
            };
            let slot = match decode(key)?.as_ref() {
                "sslmode" => &mut params.sslmode,
                "sslrootcert" => &mut params.sslrootcert,
                _ => {
                    kept.push(pair);
                    continue;
                }
            };
            *slot = Some(decode(value)?.into_owned());
        }
        let mut rest = url[..query].to_owned();
        if !kept.is_empty() {
            rest.push('?');
            rest.push_str(&kept.join("&"));
        }
        params.rest = Cow::Owned(rest);
        Ok(params)
    }
}

fn decode(text: &str) -> Result<Cow<'_, str>, String> {
    percent_decode_str(text)
        .decode_utf8()
        .map_err(|_| "a query parameter is not valid UTF-8 once percent-decoded".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(url: &str) -> (String, Option<String>, Option<String>) {
        let params = TlsParams::take_from(url).expect("readable");
        (params.rest.into_owned(), params.sslmode, params.sslrootcert)
    }

    #[test]
    fn tls_parameters_are_taken_out_of_the_query() {
        assert_eq!(
            take("postgres://u:p@db:5432/tickd?sslmode=verify-full&application_name=x&sslrootcert=%2Fca%20dir%2Fca.pem"),
            (
                "postgres://u:p@db:5432/tickd?application_name=x".to_owned(),
                Some("verify-full".to_owned()),
                Some("/ca dir/ca.pem".to_owned())
            )
        );
        assert_eq!(
            take("postgresql://db/tickd?sslmode=require&sslmode=verify-ca"),
            (
                "postgresql://db/tickd".to_owned(),
                Some("verify-ca".to_owned()),
                None
            )
        );
    }

    #[test]
    fn a_question_mark_in_the_password_is_not_the_query() {
        assert_eq!(
            take("postgres://u:p?sslmode=x@db/tickd"),
            ("postgres://u:p?sslmode=x@db/tickd".to_owned(), None, None)
        );
    }

    #[test]
    fn other_forms_are_left_whole() {
        for url in ["host=db sslmode=require", "postgres://db/tickd"] {
            assert_eq!(take(url), (url.to_owned(), None, None));
        }
    }

    #[test]
    fn the_url_is_never_shown() {
        let url = "postgres://tickd:secretpw@db:6432/timers?sslmode=require&password=secretpw";
        assert!(!format!("{:?}", StoreUrl::from(url.to_owned())).contains("secretpw"));
    }
}
