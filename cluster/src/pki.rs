//! The cluster's own certificate authority, for operators who bring none (`shoal up` writes one
//! into its data directory on first start) and for tests: a CA certificate, and certificates it
//! signs for each process (valid as TLS server and client, named for the process's host) and for
//! MONGODB-X509 users. Also writes key files.
//!
//! Must not: be used for anything but a cluster's first start or a test: an operator's own CA
//! (`--tlsCAFile`) always wins, and nothing here rotates or revokes.

use std::net::IpAddr;
use std::path::Path;

pub use rcgen::DnType;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("certificate generation: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },
}

/// A CA that signs the cluster's certificates.
pub struct ClusterCa {
    issuer: Issuer<'static, KeyPair>,
    certificate_pem: String,
    key_pem: String,
}

/// A certificate and its private key, PEM-encoded (what `--tlsCertificateKeyFile` reads).
pub struct Issued {
    pub certificate_pem: String,
    pub key_pem: String,
}

impl Issued {
    /// Certificate then key, the layout of MongoDB's `certificateKeyFile`.
    pub fn combined_pem(&self) -> String {
        format!("{}{}", self.certificate_pem, self.key_pem)
    }
}

impl ClusterCa {
    /// A new CA named `name` (its subject's CN).
    pub fn new(name: &str) -> Result<ClusterCa, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.distinguished_name = dn(&[(DnType::OrganizationName, "Shoal"), (DnType::CommonName, name)]);
        let key = KeyPair::generate()?;
        let certificate_pem = params.self_signed(&key)?.pem();
        let key_pem = key.serialize_pem();
        Ok(ClusterCa { issuer: Issuer::new(params, key), certificate_pem, key_pem })
    }

    /// A CA written earlier ([`ClusterCa::certificate_pem`], [`ClusterCa::key_pem`]).
    pub fn load(certificate_pem: &str, key_pem: &str) -> Result<ClusterCa, PkiError> {
        let key = KeyPair::from_pem(key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(certificate_pem, key)?;
        Ok(ClusterCa { issuer, certificate_pem: certificate_pem.to_owned(), key_pem: key_pem.to_owned() })
    }

    /// The CA certificate (what `--tlsCAFile` reads).
    pub fn certificate_pem(&self) -> String {
        self.certificate_pem.clone()
    }

    /// The CA's private key (keep it readable by its owner only).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A certificate for a cluster process on `hosts` (DNS names or IP addresses), usable both to
    /// serve and to connect, with subject `O=Shoal,OU=<unit>,CN=<name>`.
    pub fn issue_member(&self, name: &str, unit: &str, hosts: &[&str]) -> Result<Issued, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        for host in hosts {
            params.subject_alt_names.push(match host.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*host).try_into()?),
            });
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.distinguished_name = dn(&[
            (DnType::OrganizationName, "Shoal"),
            (DnType::OrganizationalUnitName, unit),
            (DnType::CommonName, name),
        ]);
        self.sign(params)
    }

    /// A client certificate for a MONGODB-X509 user with the subject parts given in order
    /// (most general first: `[(O, "Example"), (CN, "alice")]`).
    pub fn issue_client(&self, subject: &[(DnType, &str)]) -> Result<Issued, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.distinguished_name = dn(subject);
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Result<Issued, PkiError> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued { certificate_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

fn dn(parts: &[(DnType, &str)]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for (kind, value) in parts {
        dn.push(kind.clone(), *value);
    }
    dn
}

/// Writes `contents` to `path`, readable by its owner only (private keys, key files).
pub fn write_private(path: &Path, contents: &str) -> Result<(), PkiError> {
    let err = |source| PkiError::Write { path: path.display().to_string(), source };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(err)?;
    std::io::Write::write_all(&mut file, contents.as_bytes()).map_err(err)?;
    file.sync_all().map_err(err)
}

/// A new random key file's text: 756 base64 characters, as `openssl rand -base64 756` makes
/// (MongoDB's documented recipe).
pub fn new_key_file_text() -> String {
    use base64::Engine;
    let mut bytes = [0u8; 567];
    rand::Rng::fill(&mut rand::rng(), &mut bytes[..]);
    let text = base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut out = String::with_capacity(text.len() + text.len() / 64 + 1);
    for line in text.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::tls::{self, ClientCertificates, TlsFiles};
    use rustls::pki_types::pem::PemObject;

    #[test]
    fn issued_certificates_load_as_tls_material() {
        let dir = tempfile::tempdir().unwrap();
        let ca = ClusterCa::new("test CA").unwrap();
        let member = ca.issue_member("cfg1", "cluster", &["127.0.0.1", "localhost"]).unwrap();
        let ca_path = dir.path().join("ca.pem");
        let member_path = dir.path().join("cfg1.pem");
        std::fs::write(&ca_path, ca.certificate_pem()).unwrap();
        write_private(&member_path, &member.combined_pem()).unwrap();
        let files = TlsFiles { certificate_key_file: member_path, ca_file: Some(ca_path) };
        tls::server_config(&files, ClientCertificates::Required).unwrap();
        tls::client_config(&files).unwrap();
        let client = ca.issue_client(&[(DnType::OrganizationName, "Example"), (DnType::CommonName, "alice")]).unwrap();
        // A CA loaded back from its files signs as the original did.
        let again = ClusterCa::load(&ca.certificate_pem(), ca.key_pem()).unwrap();
        let later = again.issue_member("cfg2", "cluster", &["127.0.0.1"]).unwrap();
        let later_path = dir.path().join("cfg2.pem");
        write_private(&later_path, &later.combined_pem()).unwrap();
        let files = TlsFiles { certificate_key_file: later_path, ca_file: files.ca_file.clone() };
        tls::client_config(&files).unwrap();
        let der = rustls::pki_types::CertificateDer::from_pem_slice(client.certificate_pem.as_bytes()).unwrap();
        assert_eq!(tls::subject_name(&der).as_deref(), Some("CN=alice,O=Example"));
    }

    #[test]
    fn new_key_files_are_valid_and_differ() {
        let a = new_key_file_text();
        assert!(crate::net::ClusterKey::from_text(&a).is_ok());
        assert_ne!(a, new_key_file_text());
    }
}
