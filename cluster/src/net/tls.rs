//! TLS material as MongoDB's `net.tls.*` names it (`certificateKeyFile`: the certificate chain and
//! its private key in one PEM file; `CAFile`: the certificates that sign peers'), made into rustls
//! configurations (always the `ring` provider, TLS 1.2 and 1.3): one for the client port and one
//! for the cluster's own channels (`clusterAuthMode: x509`, where both sides present a certificate
//! the cluster CA signed).
//!
//! Must not: fall back to an unverified connection: a peer whose certificate does not verify is
//! refused, whatever the mode.

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {reason}")]
    Pem { path: String, reason: String },
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The files a process's TLS uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// `certificateKeyFile`: this process's certificate chain and private key (PEM).
    pub certificate_key_file: PathBuf,
    /// `CAFile`: certificates that sign peers' (and, for a client, the server's) certificates.
    pub ca_file: Option<PathBuf>,
}

/// Whether a server asks its clients for certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCertificates {
    /// Not asked for (no `CAFile`).
    None,
    /// Verified when presented (MONGODB-X509 users), not required
    /// (`allowConnectionsWithoutCertificates`).
    Optional,
    /// Required and verified (the cluster's channels under x509).
    Required,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.display().to_string(), source })
}

fn pem_error(path: &Path, reason: impl ToString) -> TlsError {
    TlsError::Pem { path: path.display().to_string(), reason: reason.to_string() }
}

/// The certificate chain and private key of a `certificateKeyFile`.
pub fn identity(path: &Path) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let pem = read(path)?;
    let chain = CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().map_err(|e| pem_error(path, e))?;
    if chain.is_empty() {
        return Err(pem_error(path, "no certificate found"));
    }
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| pem_error(path, format!("no private key: {e}")))?;
    Ok((chain, key))
}

/// The certificates of a `CAFile`.
pub fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let pem = read(path)?;
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        store.add(cert.map_err(|e| pem_error(path, e))?).map_err(|e| pem_error(path, e))?;
    }
    if store.is_empty() {
        return Err(pem_error(path, "no CA certificate found"));
    }
    Ok(store)
}

/// A server configuration: presents `files.certificate_key_file`; verifies client certificates
/// against `files.ca_file` as `clients` says.
pub fn server_config(files: &TlsFiles, clients: ClientCertificates) -> Result<Arc<ServerConfig>, TlsError> {
    let (chain, key) = identity(&files.certificate_key_file)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match (clients, &files.ca_file) {
        (ClientCertificates::None, _) => builder.with_no_client_auth(),
        (_, None) => return Err(TlsError::Config("verifying client certificates needs a CAFile".into())),
        (mode, Some(ca)) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider());
            let verifier =
                if mode == ClientCertificates::Optional { verifier.allow_unauthenticated() } else { verifier };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| TlsError::Config(e.to_string()))?)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// A client configuration: trusts `files.ca_file` and presents `files.certificate_key_file`.
pub fn client_config(files: &TlsFiles) -> Result<Arc<ClientConfig>, TlsError> {
    let ca = files.ca_file.as_ref().ok_or_else(|| TlsError::Config("a TLS client needs a CAFile".into()))?;
    let (chain, key) = identity(&files.certificate_key_file)?;
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots(ca)?)
        .with_client_auth_cert(chain, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// The subject of a verified peer certificate, as MongoDB names an X.509 user (RFC 2253 order,
/// most specific first: `CN=alice,OU=eng,O=example`).
pub fn subject_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let mut parts: Vec<String> = Vec::new();
    for rdn in parsed.subject().iter() {
        for attr in rdn.iter() {
            let key = x509_parser::objects::oid2abbrev(attr.attr_type(), x509_parser::objects::oid_registry())
                .map(str::to_owned)
                .unwrap_or_else(|_| attr.attr_type().to_id_string());
            let value = attr.as_str().ok()?;
            parts.push(format!("{key}={}", escape_rdn(value)));
        }
    }
    parts.reverse();
    Some(parts.join(","))
}

/// RFC 4514 escaping of an attribute value.
fn escape_rdn(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        let edge = i == 0 && (c == ' ' || c == '#') || i + 1 == value.chars().count() && c == ' ';
        if edge || matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdn_values_are_escaped() {
        assert_eq!(escape_rdn("a,b"), "a\\,b");
        assert_eq!(escape_rdn(" lead"), "\\ lead");
        assert_eq!(escape_rdn("plain"), "plain");
    }

    #[test]
    fn missing_files_are_errors() {
        let files = TlsFiles { certificate_key_file: "/nonexistent/server.pem".into(), ca_file: None };
        assert!(matches!(server_config(&files, ClientCertificates::None), Err(TlsError::Read { .. })));
        assert!(client_config(&files).is_err());
    }
}
