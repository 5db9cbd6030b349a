//! A throwaway certificate authority for one test, and the server and client certificates
//! it signs, in PEM (written to files where a program wants paths).

use std::path::{Path, PathBuf};

/// A CA made for one test; its certificate is `pem`.
pub(crate) struct TestCa {
    pub pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

/// A certificate and its private key, in PEM.
pub(crate) struct CertAndKey {
    pub cert_pem: String,
    pub key_pem: String,
}

impl TestCa {
    /// A CA whose common name is "NAME test CA".
    pub(crate) fn new(name: &str) -> TestCa {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} test CA"));
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().expect("CA key");
        let pem = params.self_signed(&key).expect("self-signed CA").pem();
        TestCa {
            pem,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate for `names` (DNS names or IP addresses) only, for `usage`.
    pub(crate) fn sign(
        &self,
        common_name: &str,
        names: &[&str],
        usage: rcgen::ExtendedKeyUsagePurpose,
    ) -> CertAndKey {
        let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).expect("certificate params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        params.extended_key_usages = vec![usage];
        let key = rcgen::KeyPair::generate().expect("certificate key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        CertAndKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A server certificate for `names`.
    pub(crate) fn server(&self, common_name: &str, names: &[&str]) -> CertAndKey {
        self.sign(
            common_name,
            names,
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate (no names).
    pub(crate) fn client(&self, common_name: &str) -> CertAndKey {
        self.sign(common_name, &[], rcgen::ExtendedKeyUsagePurpose::ClientAuth)
    }

    /// Writes the CA's certificate to `dir/NAME` and returns its path.
    pub(crate) fn write(&self, dir: &Path, name: &str) -> PathBuf {
        write_file(dir, name, &self.pem)
    }
}

impl CertAndKey {
    /// Writes `dir/NAME.pem` and `dir/NAME.key`, and returns their paths.
    pub(crate) fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        (
            write_file(dir, &format!("{name}.pem"), &self.cert_pem),
            write_file(dir, &format!("{name}.key"), &self.key_pem),
        )
    }
}

/// Writes `contents` to `dir/NAME` and returns the path.
pub(crate) fn write_file(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}
