//! TLS to the store database: libpq's `sslmode` values, carried out by rustls on the ring
//! provider (the one tonic's `tls-ring` already brings in, so there is one crypto stack).
//!
//! | sslmode | encrypted | the server's certificate is checked for |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default) | when the server offers TLS | its chain, only if a CA is given |
//! | `require` | always | its chain, only if a CA is given |
//! | `verify-ca` | always | its chain, up to the CA |
//! | `verify-full` | always | its chain, and the host name connected to |
//!
//! As in libpq, `require` encrypts without proving whom it talks to unless a root
//! certificate is given; the verify modes need one.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode as Negotiation;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::pem::{roots_from_pem, RootsError};

/// libpq's `sslmode` (`allow`, which prefers plaintext, is left out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub(crate) fn parse(value: &str) -> Result<Self, String> {
        Ok(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => {
                return Err(format!(
                    "sslmode={value} is not supported: use disable, prefer, require, verify-ca \
                     or verify-full"
                ))
            }
        })
    }

    /// The mode tokio-postgres parsed itself (from libpq's `key=value` form, or its default).
    pub(crate) fn from_negotiation(negotiation: Negotiation) -> Self {
        match negotiation {
            Negotiation::Disable => Self::Disable,
            Negotiation::Prefer => Self::Prefer,
            // Require, and any stricter mode a later tokio-postgres may add.
            _ => Self::Require,
        }
    }

    /// What tokio-postgres is told. It knows only whether to ask for TLS and whether to
    /// insist; the checks of the verify modes are the rustls configuration's.
    pub(crate) fn negotiation(self) -> Negotiation {
        match self {
            Self::Disable => Negotiation::Disable,
            Self::Prefer => Negotiation::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => Negotiation::Require,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The TLS side of every connection a replica opens: `mode`'s checks, with the PEM
/// certificates of `ca_file` as the only trust anchors. Built once, at start-up, so that a
/// missing or unreadable CA fails the start rather than the first reconnection.
pub(crate) fn connector(
    mode: SslMode,
    ca_file: Option<&Path>,
) -> Result<MakeRustlsConnect, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    let roots = ca_file.map(load_roots).transpose()?.map(Arc::new);
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("configuring TLS to the store: {error}"))?;
    let config = match (mode, roots) {
        (SslMode::VerifyFull, Some(roots)) => {
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
            return Err(format!(
                "sslmode={mode} needs the CA that signed the database's certificate: give it \
                 with --store-ca-file (or sslrootcert= in the --store URL)"
            ))
        }
        (_, roots) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly { roots, algorithms }))
            .with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

/// Every certificate in a PEM bundle. Ones webpki cannot use (some system bundles carry
/// a few) are skipped, as long as one is left.
fn load_roots(path: &Path) -> Result<RootCertStore, String> {
    let shown = path.display();
    let pem = std::fs::read(path)
        .map_err(|error| format!("reading the store CA file {shown}: {error}"))?;
    roots_from_pem(&pem).map_err(|error| match error {
        RootsError::Unreadable(error) => format!("reading the store CA file {shown}: {error}"),
        RootsError::NoUsableCertificate => {
            format!("the store CA file {shown} holds no usable PEM certificate")
        }
    })
}

/// `verify-ca`: the server's chain must lead to one of `roots`, whatever name it is for
/// (a database reached through an address its certificate does not list). Without roots
/// (`require` or `prefer` with no CA given) nothing about the certificate is checked: the
/// connection is encrypted, but not to a proven server. Either way the handshake's
/// signatures are checked against the certificate presented.
#[derive(Debug)]
struct ChainOnly {
    roots: Option<Arc<RootCertStore>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let certificate = rustls::server::ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_cert_signed_by_trust_anchor(
                &certificate,
                roots,
                intermediates,
                now,
                self.algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, certificate, signature, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, certificate, signature, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_as_libpq_spells_them() {
        for mode in [
            SslMode::Disable,
            SslMode::Prefer,
            SslMode::Require,
            SslMode::VerifyCa,
            SslMode::VerifyFull,
        ] {
            assert_eq!(SslMode::parse(&mode.to_string()), Ok(mode));
        }
        let allow = SslMode::parse("allow").unwrap_err();
        assert!(allow.contains("sslmode=allow is not supported"), "{allow}");
    }

    #[test]
    fn the_verify_modes_need_a_ca() {
        for mode in [SslMode::VerifyCa, SslMode::VerifyFull] {
            let error = connector(mode, None).err().expect("refused without a CA");
            assert!(error.contains("--store-ca-file"), "{error}");
        }
        for mode in [SslMode::Disable, SslMode::Prefer, SslMode::Require] {
            assert!(connector(mode, None).is_ok(), "{mode}");
        }
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let error = connector(SslMode::VerifyFull, Some(&missing))
            .err()
            .unwrap();
        assert!(error.contains("reading the store CA file"), "{error}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let error = connector(SslMode::VerifyFull, Some(&empty)).err().unwrap();
        assert!(error.contains("no usable PEM certificate"), "{error}");
    }
}
