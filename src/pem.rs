//! Trusted roots read from PEM: the client CA of the API's mutual TLS (`--tls-client-ca`)
//! and the store database's CA (`--store-ca-file`) are read the same way, each caller naming
//! its own flag or file in the messages.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

/// Why a PEM text gave no roots.
#[derive(Debug)]
pub(crate) enum RootsError {
    /// A PEM section could not be read (the parser's message).
    Unreadable(String),
    /// The text holds no certificate that rustls can use as a root.
    NoUsableCertificate,
}

/// The certificates of `pem` as trusted roots; certificates rustls cannot parse as roots
/// are passed over, and none left at all is an error.
pub(crate) fn roots_from_pem(pem: &[u8]) -> Result<RootCertStore, RootsError> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| RootsError::Unreadable(error.to_string()))?;
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(certificates);
    if roots.is_empty() {
        return Err(RootsError::NoUsableCertificate);
    }
    Ok(roots)
}
