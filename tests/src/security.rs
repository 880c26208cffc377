//! Running the suite with the cluster's security on: `SHOAL_TEST_SECURITY=keyFile` makes every
//! config server, shard and router this harness starts authenticate its peers with a key file
//! (routers then require clients to authenticate, as mongos does), and every client the harness
//! hands a test authenticate as a `root` user, created through the localhost exception on first
//! use. CI runs the sharding, migration, replication and failover tests this way too.
//!
//! One key per test process (its text written into each cluster's directory), so the test
//! process's own gRPC clients (catalog reads, shard calls) authenticate with it as well.
//!
//! Must not: change a process whose arguments already name its security (the security tests set
//! their own), or touch anything when the variable is unset.

use std::path::Path;
use std::sync::OnceLock;

use mongodb::options::{ClientOptions, Credential};

/// The variable that turns it on.
pub const VARIABLE: &str = "SHOAL_TEST_SECURITY";
pub const ROOT_USER: &str = "root";
pub const ROOT_PASSWORD: &str = "test-root-password";

/// Flags that mean a process's security is already chosen by its test.
const OWN_SECURITY_FLAGS: &[&str] = &["--keyFile", "--clusterAuthMode", "--auth", "--tlsMode"];

/// The key text of this test process, when the suite runs secured (installed for this process's
/// own channels on first use).
fn key_text() -> Option<&'static str> {
    static KEY: OnceLock<Option<String>> = OnceLock::new();
    KEY.get_or_init(|| match std::env::var(VARIABLE).as_deref() {
        Ok("keyFile") => {
            let text = shoal_cluster::pki::new_key_file_text();
            if let Ok(key) = shoal_cluster::net::ClusterKey::from_text(&text) {
                shoal_cluster::net::install(shoal_cluster::net::ClusterAuth::KeyFile(key));
            }
            Some(text)
        }
        _ => None,
    })
    .as_deref()
}

/// Whether the suite runs secured.
pub fn enabled() -> bool {
    key_text().is_some()
}

/// Arguments to add to a server process's (`role`) command line, writing the key file next to its
/// log (`log_path`) if needed.
pub fn server_args(role: &str, args: &[String], log_path: &Path) -> anyhow::Result<Vec<String>> {
    let Some(text) = key_text() else { return Ok(Vec::new()) };
    // A router or shard without `--config` runs the legacy single-shard mode: no catalog, so no
    // users a secured router could authenticate.
    let legacy = role != "configsvr" && !args.iter().any(|a| a == "--config");
    if !matches!(role, "configsvr" | "shard" | "router") || legacy || names_own_security(args) {
        return Ok(Vec::new());
    }
    let dir = log_path.parent().unwrap_or(Path::new("."));
    let path = dir.join("cluster.key");
    if !path.exists() {
        shoal_cluster::pki::write_private(&path, text)?;
    }
    Ok(vec!["--keyFile".into(), path.display().to_string()])
}

/// Whether `args` choose the process's security themselves.
pub fn names_own_security<S: AsRef<str>>(args: &[S]) -> bool {
    args.iter().any(|a| OWN_SECURITY_FLAGS.contains(&a.as_ref()))
}

/// Makes `options` (a harness client of the router at `options.hosts`) authenticate as root,
/// creating root first if the cluster has no user yet.
pub async fn authenticate(options: &mut ClientOptions) -> anyhow::Result<()> {
    if !enabled() {
        return Ok(());
    }
    let anonymous = mongodb::Client::with_options(options.clone())?;
    let created = anonymous
        .database("admin")
        .run_command(bson::doc! { "createUser": ROOT_USER, "pwd": ROOT_PASSWORD, "roles": ["root"] })
        .await;
    match created {
        Ok(_) => {}
        // Unauthorized: the localhost exception is over, root exists; 51003: it already exists.
        Err(e) if matches!(crate::expect::server_code(&e), Some(13) | Some(51003)) => {}
        Err(e) => return Err(e.into()),
    }
    options.credential = Some(
        Credential::builder()
            .username(ROOT_USER.to_owned())
            .password(ROOT_PASSWORD.to_owned())
            .source("admin".to_owned())
            .build(),
    );
    Ok(())
}
