//! A server process's cluster authentication from its command line (`--clusterAuthMode`,
//! `--keyFile`, `--tlsCertificateKeyFile`, `--tlsCAFile`, `--tlsClusterFile`), installed once
//! before the process opens or accepts any channel; and a router's client-port TLS (`--tlsMode`).

use anyhow::{Context, bail};
use shoal_cluster::net::tls::{self, ClientCertificates};
use shoal_cluster::net::{self, ClusterAuth, TlsFiles};
use shoal_router::server::tls::{ClientTls, TlsMode};

use crate::cli::ClusterAuthArgs;

/// The cluster authentication the flags ask for (MongoDB's rules: `--keyFile` alone means
/// `keyFile`; `x509` needs a certificate and the CA file).
pub fn cluster_auth(args: &ClusterAuthArgs) -> anyhow::Result<ClusterAuth> {
    let mode = args.cluster_auth_mode.as_deref().or(args.key_file.as_ref().map(|_| "keyFile"));
    match mode {
        None => Ok(ClusterAuth::None),
        Some("keyFile") => {
            let Some(path) = &args.key_file else { bail!("--clusterAuthMode keyFile needs --keyFile") };
            ClusterAuth::key_file(path).context("cannot use the key file")
        }
        Some("x509") => {
            let certificate = args.tls_cluster_file.as_ref().or(args.tls_certificate_key_file.as_ref());
            let (Some(certificate), Some(ca)) = (certificate, &args.tls_ca_file) else {
                bail!("--clusterAuthMode x509 needs --tlsCertificateKeyFile (or --tlsClusterFile) and --tlsCAFile")
            };
            let files = TlsFiles { certificate_key_file: certificate.clone(), ca_file: Some(ca.clone()) };
            ClusterAuth::x509(&files).context("cannot use the cluster certificate")
        }
        Some(other) => bail!("unknown --clusterAuthMode {other}"),
    }
}

/// Reads the flags and installs the result for the whole process; answers whether peers are
/// authenticated.
pub fn install(args: &ClusterAuthArgs) -> anyhow::Result<bool> {
    let auth = cluster_auth(args)?;
    let enabled = !matches!(auth, ClusterAuth::None);
    if enabled {
        tracing::info!(mode = auth.mode(), "cluster members authenticate each other");
    }
    net::install(auth);
    Ok(enabled)
}

/// The router's client-port TLS from `--tlsMode` and the certificate flags.
pub fn client_tls(args: &ClusterAuthArgs, mode: &str, without_certificates: bool) -> anyhow::Result<Option<ClientTls>> {
    let Some(mode) = TlsMode::parse(mode) else { bail!("unknown --tlsMode {mode}") };
    if mode == TlsMode::Disabled {
        return Ok(None);
    }
    let Some(certificate) = &args.tls_certificate_key_file else { bail!("--tlsMode needs --tlsCertificateKeyFile") };
    let clients = match (&args.tls_ca_file, without_certificates) {
        (None, _) => ClientCertificates::None,
        (Some(_), true) => ClientCertificates::Optional,
        (Some(_), false) => ClientCertificates::Required,
    };
    let files = TlsFiles { certificate_key_file: certificate.clone(), ca_file: args.tls_ca_file.clone() };
    let config = tls::server_config(&files, clients).context("cannot use the TLS certificate")?;
    // Clients speak the MongoDB wire protocol over TLS, not HTTP/2.
    let mut config = std::sync::Arc::unwrap_or_clone(config);
    config.alpn_protocols.clear();
    Ok(Some(ClientTls { mode, config: std::sync::Arc::new(config) }))
}
