//! Signed deliveries, by the Standard Webhooks spec (standardwebhooks.com): each push of a
//! namespace given `--sink-secret-file NAMESPACE=PATH` carries `webhook-id` (the push's
//! idempotency key, the same for every attempt), `webhook-timestamp` (Unix seconds as it
//! leaves) and `webhook-signature`: `v1,` and the base64 HMAC-SHA256 of
//! `id.timestamp.body` under each secret of the file, space-separated. A receiver checks
//! them with any Standard Webhooks library, and rejects a push whose body was changed or
//! whose timestamp is too old (a replay).
//!
//! The file holds one secret per line in the spec's `whsec_<base64>` form; with two lines
//! every push is signed with both, so that a secret is rotated without a gap (add the new
//! one, move receivers to it, remove the old). It is read again within a second of
//! changing (a [`WatchedFile`]). A sink set through the API may be given its secrets in
//! `SetSink` instead (kept with the sink, as its URL's credentials are). A secret is never
//! shown: not in a log line, an error, a metric or an answer of the API; errors name the
//! flag, the file and the line, or the field and the secret's position.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::hmac;

use super::watched_file::WatchedFile;

const FLAG: &str = "--sink-secret-file";
/// The prefix of a secret in the spec's form.
const SECRET_PREFIX: &str = "whsec_";
/// Secrets one file may hold: two during a rotation; a few more are tolerated.
const MOST_SECRETS: usize = 4;
/// The spec's bounds on a secret's size, decoded: 24 to 64 bytes.
const SECRET_BYTES: std::ops::RangeInclusive<usize> = 24..=64;

/// `--sink-secret-file NAMESPACE=PATH`, as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFileFlag {
    pub namespace: String,
    pub path: std::path::PathBuf,
}

impl std::str::FromStr for SecretFileFlag {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.split_once('=') {
            Some((namespace, path)) if !namespace.is_empty() && !path.is_empty() => {
                Ok(SecretFileFlag {
                    namespace: namespace.to_owned(),
                    path: path.into(),
                })
            }
            _ => Err(format!(
                "{text:?}: give NAMESPACE=PATH, the namespace whose pushes are signed and \
                 the file of its secrets"
            )),
        }
    }
}

/// One namespace's secrets, as its file holds them or as `SetSink` gave them.
pub(crate) enum Signing {
    File(WatchedFile<Secrets>),
    Given(Secrets),
}

/// The keys of a file's secrets, in its order.
pub(crate) struct Secrets(Vec<hmac::Key>);

/// Why a secret cannot be used (never what it holds).
enum Unusable {
    NotInForm,
    Size(usize),
}

/// A secret's key, from its `whsec_<base64>` form.
fn key_of(secret: &str) -> Result<hmac::Key, Unusable> {
    let decoded = secret
        .strip_prefix(SECRET_PREFIX)
        .and_then(|encoded| STANDARD.decode(encoded).ok())
        .ok_or(Unusable::NotInForm)?;
    if !SECRET_BYTES.contains(&decoded.len()) {
        return Err(Unusable::Size(decoded.len()));
    }
    Ok(hmac::Key::new(hmac::HMAC_SHA256, &decoded))
}

impl Unusable {
    /// The refusal, `what` naming the secret (a file's line, a field's position).
    fn refusal(&self, what: &str) -> String {
        match self {
            Unusable::NotInForm => format!("{what} is not a secret in the form whsec_<base64>"),
            Unusable::Size(bytes) => format!(
                "{what} is {bytes} bytes; a secret is {} to {} bytes (before base64)",
                SECRET_BYTES.start(),
                SECRET_BYTES.end()
            ),
        }
    }
}

/// What a signed push carries beside its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Signature {
    /// `webhook-id`: the idempotency key.
    pub(crate) id: String,
    /// `webhook-timestamp`: Unix seconds.
    pub(crate) timestamp: String,
    /// `webhook-signature`: `v1,<base64>` per secret, space-separated.
    pub(crate) signatures: String,
}

impl Signing {
    /// Reads the secret file of `--sink-secret-file`, refusing one that cannot be read or
    /// holds no usable secret (the message names the flag, the file and the line).
    pub(crate) fn read(path: &Path) -> Result<Signing, String> {
        Ok(Signing::File(WatchedFile::read(FLAG, path, parse_secrets)?))
    }

    /// The secrets `SetSink` gave (1 to 4, each `whsec_<base64>`); refused naming the
    /// field and the position, never the secret.
    pub(crate) fn given(secrets: &[String]) -> Result<Signing, String> {
        if secrets.is_empty() || secrets.len() > MOST_SECRETS {
            return Err(format!(
                "{} given; give 1 to {MOST_SECRETS} (two while rotating)",
                secrets.len()
            ));
        }
        let keys = secrets
            .iter()
            .enumerate()
            .map(|(index, secret)| {
                key_of(secret).map_err(|unusable| {
                    unusable.refusal(&format!("the secret at position {}", index + 1))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Signing::Given(Secrets(keys)))
    }

    /// The signature of a push of `body` whose idempotency key is `id`, made now.
    pub(crate) fn sign(&self, id: &str, body: &[u8]) -> Signature {
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs())
            .to_string();
        match self {
            Signing::File(file) => sign_with(&file.current().0, id, timestamp, body),
            Signing::Given(secrets) => sign_with(&secrets.0, id, timestamp, body),
        }
    }
}

fn sign_with(keys: &[hmac::Key], id: &str, timestamp: String, body: &[u8]) -> Signature {
    let signatures = keys
        .iter()
        .map(|key| {
            let mut context = hmac::Context::with_key(key);
            context.update(id.as_bytes());
            context.update(b".");
            context.update(timestamp.as_bytes());
            context.update(b".");
            context.update(body);
            format!("v1,{}", STANDARD.encode(context.sign().as_ref()))
        })
        .collect::<Vec<_>>()
        .join(" ");
    Signature {
        id: id.to_owned(),
        timestamp,
        signatures,
    }
}

fn parse_secrets(flag: &str, path: &Path, contents: &str) -> Result<Secrets, String> {
    let shown = path.display();
    let mut keys = Vec::new();
    for (index, line) in contents.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let number = index + 1;
        // Neither the line nor any part of it is echoed: it is a secret.
        let key = key_of(line).map_err(|unusable| match unusable {
            Unusable::NotInForm => unusable.refusal(&format!("{flag} {shown}: line {number}")),
            Unusable::Size(_) => {
                unusable.refusal(&format!("{flag} {shown}: the secret of line {number}"))
            }
        })?;
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(format!("{flag} {shown}: the file holds no secret"));
    }
    if keys.len() > MOST_SECRETS {
        return Err(format!(
            "{flag} {shown}: {} secrets; at most {MOST_SECRETS} (two while rotating)",
            keys.len()
        ));
    }
    Ok(Secrets(keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the spec's reference libraries: this secret, id, timestamp and
    /// payload sign to this signature.
    #[test]
    fn a_push_is_signed_as_the_spec_s_reference_libraries_sign_it() {
        let secrets = parse_secrets(
            FLAG,
            Path::new("x"),
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
        )
        .unwrap();
        let signature = sign_with(
            &secrets.0,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            "1614265330".into(),
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(
            signature.signatures,
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn secrets_given_sign_as_the_file_s_and_unusable_ones_are_refused_by_position() {
        let one = format!("whsec_{}", STANDARD.encode([1u8; 32]));
        let file = parse_secrets(FLAG, Path::new("x"), &one).unwrap();
        let Ok(Signing::Given(given)) = Signing::given(std::slice::from_ref(&one)) else {
            panic!("refused a usable secret");
        };
        assert_eq!(
            sign_with(&given.0, "id", "1".into(), b"body"),
            sign_with(&file.0, "id", "1".into(), b"body")
        );
        let short = format!("whsec_{}", STANDARD.encode([1u8; 8]));
        for (secrets, says) in [
            (vec![], "0 given"),
            (vec![one.clone(); 5], "5 given"),
            (
                vec![one.clone(), "whsec_???".into()],
                "position 2 is not a secret",
            ),
            (vec![short.clone()], "position 1 is 8 bytes"),
        ] {
            let Err(why) = Signing::given(&secrets) else {
                panic!("took {secrets:?}");
            };
            assert!(why.contains(says), "{why}");
            assert!(!why.contains(&short[6..]), "echoed: {why}");
        }
    }

    #[test]
    fn two_secrets_sign_with_both() {
        let one = format!("whsec_{}", STANDARD.encode([1u8; 32]));
        let two = format!("whsec_{}", STANDARD.encode([2u8; 32]));
        let both = parse_secrets(FLAG, Path::new("x"), &format!("{one}\n\n{two}\n")).unwrap();
        let alone = parse_secrets(FLAG, Path::new("x"), &two).unwrap();
        let signed = sign_with(&both.0, "id", "1".into(), b"body").signatures;
        let second = sign_with(&alone.0, "id", "1".into(), b"body").signatures;
        let parts: Vec<&str> = signed.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1], second);
        assert_ne!(parts[0], parts[1]);
    }

    #[test]
    fn an_unusable_secret_file_is_refused_naming_the_line_never_the_secret() {
        let short = format!("whsec_{}", STANDARD.encode([7u8; 8]));
        let good = format!("whsec_{}", STANDARD.encode([7u8; 32]));
        for (contents, expected) in [
            ("", "holds no secret"),
            ("  \n\n", "holds no secret"),
            ("hunter2-hunter2-hunter2-hunter2", "line 1 is not a secret"),
            ("whsec_%%%%", "line 1 is not a secret"),
            (short.as_str(), "is 8 bytes"),
        ] {
            let error = parse_secrets(FLAG, Path::new("/run/secret"), contents)
                .err()
                .expect("refused");
            assert!(
                error.starts_with("--sink-secret-file /run/secret: "),
                "{error}"
            );
            assert!(error.contains(expected), "{error}");
            let secret = contents.trim();
            assert!(
                secret.is_empty() || !error.contains(secret),
                "the secret is not echoed: {error}"
            );
        }
        let five = [good.as_str(); 5].join("\n");
        let error = parse_secrets(FLAG, Path::new("f"), &five).err().unwrap();
        assert!(error.contains("at most 4"), "{error}");
        assert!(!error.contains(&good));
    }
}
