//! The key file and certificates `shoal up` hands its processes, as the spec's `security` and
//! `net.tls` ask: the operator's own files when the spec names them, otherwise generated into the
//! data directory on first start (`cluster.key`; `pki/ca.pem` with `pki/ca.key`, and one
//! `pki/<process>.pem` per process plus `pki/launcher.pem` for `shoal up`'s own catalog calls),
//! and reused on every later start. Key material is written readable by its owner only.
//!
//! Must not: overwrite anything that exists (a restart keeps the cluster's identity), or generate a
//! certificate when the operator named a CA without its key (their certificate is used instead).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use shoal_cluster::net::TlsFiles;
use shoal_cluster::pki::{ClusterCa, new_key_file_text, write_private};

use crate::spec::{ClusterAuthMode, ClusterSpec, TlsModeSpec};

/// Where each process's credentials are, for the plan's command lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    pub cluster_auth: Option<ClusterAuthMode>,
    pub key_file: Option<PathBuf>,
    /// The CA file every process trusts (x509 or client TLS).
    pub ca_file: Option<PathBuf>,
    /// The cluster's own CA issued it (clients then need no certificate by default).
    pub ca_generated: bool,
    /// `--tlsCertificateKeyFile` per process name (`launcher` for `shoal up` itself).
    pub certificates: std::collections::BTreeMap<String, PathBuf>,
}

impl Secrets {
    pub fn certificate(&self, process: &str) -> Option<&Path> {
        self.certificates.get(process).map(PathBuf::as_path)
    }

    /// The TLS files of `process` (certificate and CA), when it has a certificate.
    pub fn tls_files(&self, process: &str) -> Option<TlsFiles> {
        Some(TlsFiles { certificate_key_file: self.certificate(process)?.to_owned(), ca_file: self.ca_file.clone() })
    }
}

/// The name `shoal up`'s own certificate is kept under.
pub const LAUNCHER: &str = "launcher";

/// Finds or creates every file the spec's security settings need.
pub fn prepare(spec: &ClusterSpec, data_dir: &Path, hosts: &[String]) -> anyhow::Result<Secrets> {
    let mode = spec.security.effective_cluster_auth();
    let tls = &spec.net.tls;
    let mut secrets = Secrets { cluster_auth: mode, ..Secrets::default() };
    if mode == Some(ClusterAuthMode::KeyFile) {
        secrets.key_file = Some(match &spec.security.key_file {
            Some(path) => path.clone(),
            None => {
                let path = data_dir.join("cluster.key");
                if !path.exists() {
                    write_private(&path, &new_key_file_text())?;
                    tracing::info!(path = %path.display(), "generated the cluster's key file");
                }
                path
            }
        });
    }
    let needs_certificates = mode == Some(ClusterAuthMode::X509) || tls.mode != TlsModeSpec::Disabled;
    if !needs_certificates {
        return Ok(secrets);
    }
    let names = process_names(spec);
    match (&tls.certificate_key_file, &tls.ca_file) {
        (Some(certificate), Some(ca)) => {
            secrets.ca_file = Some(ca.clone());
            for name in names.iter().chain([&LAUNCHER.to_owned()]) {
                secrets.certificates.insert(name.clone(), certificate.clone());
            }
        }
        (None, Some(_)) => bail!(
            "net.tls.CAFile names the operator's CA, whose key shoal up does not have: also give \
             net.tls.certificateKeyFile (one certificate for every process), or neither to let \
             shoal up make the cluster's own CA"
        ),
        (Some(_), None) => bail!("net.tls.certificateKeyFile needs net.tls.CAFile"),
        (None, None) => {
            let pki = data_dir.join("pki");
            std::fs::create_dir_all(&pki).with_context(|| format!("cannot create {}", pki.display()))?;
            let ca = own_ca(&pki, &spec.name)?;
            secrets.ca_file = Some(pki.join("ca.pem"));
            secrets.ca_generated = true;
            let host_refs: Vec<&str> = hosts.iter().map(String::as_str).collect();
            for name in names.iter().chain([&LAUNCHER.to_owned()]) {
                let path = pki.join(format!("{name}.pem"));
                if !path.exists() {
                    let issued = ca.issue_member(name, &spec.name, &host_refs)?;
                    write_private(&path, &issued.combined_pem())?;
                }
                secrets.certificates.insert(name.clone(), path);
            }
        }
    }
    Ok(secrets)
}

/// The cluster's own CA under `pki`, created on first use.
fn own_ca(pki: &Path, cluster: &str) -> anyhow::Result<ClusterCa> {
    let (cert_path, key_path) = (pki.join("ca.pem"), pki.join("ca.key"));
    if cert_path.exists() && key_path.exists() {
        let read = |p: &Path| std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()));
        return Ok(ClusterCa::load(&read(&cert_path)?, &read(&key_path)?)?);
    }
    let ca = ClusterCa::new(&format!("{cluster} cluster CA"))?;
    write_private(&key_path, ca.key_pem())?;
    std::fs::write(&cert_path, ca.certificate_pem())
        .with_context(|| format!("cannot write {}", cert_path.display()))?;
    tracing::info!(path = %cert_path.display(), "generated the cluster's CA");
    Ok(ca)
}

/// Every process of the spec by its process name.
fn process_names(spec: &ClusterSpec) -> Vec<String> {
    let mut names: Vec<String> = spec.config_servers.iter().map(|c| c.name.clone()).collect();
    for shard in &spec.shards {
        names.extend((0..shard.members.len()).map(|i| shard.member_name(i)));
    }
    names.extend(spec.routers.iter().map(|r| r.name.clone()));
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = "name: t\nconfig_servers: [{ name: cfg1, port: 1 }]\nrouters: [{ name: r0, port: 2 }]\n\
                        shards: [{ name: s0, members: [{ port: 3 }] }]\n";

    fn spec(extra: &str) -> ClusterSpec {
        ClusterSpec::parse(&format!("{SPEC}{extra}"), "test").unwrap()
    }

    #[test]
    fn nothing_without_security() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(prepare(&spec(""), dir.path(), &[]).unwrap(), Secrets::default());
    }

    #[test]
    fn authorization_generates_a_key_file_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec("security: { authorization: enabled }\n");
        let first = prepare(&s, dir.path(), &[]).unwrap();
        let key = first.key_file.clone().unwrap();
        let text = std::fs::read_to_string(&key).unwrap();
        let again = prepare(&s, dir.path(), &[]).unwrap();
        assert_eq!(first, again);
        assert_eq!(std::fs::read_to_string(&key).unwrap(), text, "a restart keeps the key");
    }

    #[test]
    fn x509_issues_a_certificate_per_process_and_keeps_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec("security: { authorization: enabled, clusterAuthMode: x509 }\n");
        let hosts = vec!["127.0.0.1".to_owned()];
        let first = prepare(&s, dir.path(), &hosts).unwrap();
        assert!(first.ca_generated && first.key_file.is_none());
        for name in ["cfg1", "s0", "r0", LAUNCHER] {
            let files = first.tls_files(name).unwrap();
            shoal_cluster::net::tls::client_config(&files).unwrap();
        }
        let ca = std::fs::read_to_string(first.ca_file.as_ref().unwrap()).unwrap();
        // A later start with one more process reuses the CA and issues only what is missing.
        std::fs::remove_file(first.certificate("r0").unwrap()).unwrap();
        let again = prepare(&s, dir.path(), &hosts).unwrap();
        assert_eq!(std::fs::read_to_string(again.ca_file.as_ref().unwrap()).unwrap(), ca);
        shoal_cluster::net::tls::client_config(&again.tls_files("r0").unwrap()).unwrap();
    }
}
