//! A server process's cluster authentication from its command line (`--clusterAuthMode`,
//! `--keyFile`, `--tlsCertificateKeyFile`, `--tlsCAFile`, `--tlsClusterFile`), installed once
//! before the process opens or accepts any channel.

use anyhow::{Context, bail};
use shoal_cluster::net::{self, ClusterAuth, TlsFiles};

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
