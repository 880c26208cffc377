//! `schemaVersion` and `runOnRequirements`: which files and tests apply to Shoal. Shoal is a
//! "sharded" topology (its shards are replica groups, so also "sharded-replicaset"), never
//! serverless, runs these tests without auth, and its version is the router's `buildInfo` version.

use bson::{Bson, Document};

/// The newest schema version this runner reads (files with a newer major version are refused;
/// minor versions only add features, which fail as "not supported by the runner" if used).
pub const SCHEMA_MAJOR: u32 = 1;

/// What the runner knows about the deployment under test.
pub struct Server {
    pub version: Vec<u32>,
    pub auth: bool,
}

pub fn parse_version(s: &str) -> Vec<u32> {
    s.split(['.', '-']).map_while(|p| p.parse().ok()).collect()
}

fn cmp(a: &[u32], b: &[u32]) -> std::cmp::Ordering {
    let n = a.len().max(b.len());
    let get = |v: &[u32], i: usize| v.get(i).copied().unwrap_or(0);
    (0..n).map(|i| get(a, i).cmp(&get(b, i))).find(|o| o.is_ne()).unwrap_or(std::cmp::Ordering::Equal)
}

/// `Ok(())` if the file's schema version is one the runner reads.
pub fn check_schema(version: &str) -> Result<(), String> {
    match parse_version(version).first() {
        Some(&m) if m == SCHEMA_MAJOR => Ok(()),
        _ => Err(format!("schemaVersion {version} not supported")),
    }
}

/// `None` if any requirement is met (or there are none), else why none is.
pub fn unmet(requirements: Option<&Bson>, server: &Server) -> Option<String> {
    let Some(Bson::Array(reqs)) = requirements else { return None };
    if reqs.is_empty() {
        return None;
    }
    let reasons: Vec<Option<String>> =
        reqs.iter().filter_map(|r| r.as_document().map(|r| why_not(r, server))).collect();
    match reasons.iter().any(Option::is_none) {
        true => None,
        false => Some(reasons.into_iter().flatten().collect::<Vec<_>>().join(" / ")),
    }
}

fn why_not(req: &Document, server: &Server) -> Option<String> {
    if let Ok(min) = req.get_str("minServerVersion")
        && cmp(&server.version, &parse_version(min)).is_lt()
    {
        return Some(format!("minServerVersion {min}"));
    }
    if let Ok(max) = req.get_str("maxServerVersion")
        && cmp(&server.version, &parse_version(max)).is_gt()
    {
        return Some(format!("maxServerVersion {max}"));
    }
    if let Ok(topologies) = req.get_array("topologies")
        && !topologies.iter().any(|t| matches!(t.as_str(), Some("sharded" | "sharded-replicaset")))
    {
        return Some(format!("topologies {topologies:?}"));
    }
    if req.get_str("serverless").is_ok_and(|s| s == "require") {
        return Some("serverless required".into());
    }
    if let Ok(auth) = req.get_bool("auth")
        && auth != server.auth
    {
        return Some(format!("auth {auth}"));
    }
    if req.contains_key("authMechanism") {
        return Some("authMechanism".into());
    }
    if req.contains_key("serverParameters") {
        return Some("serverParameters (not evaluated)".into());
    }
    if req.get_bool("csfle").unwrap_or(false) {
        return Some("csfle".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use super::*;

    #[test]
    fn version_gates() {
        let s = Server { version: parse_version("7.0.0"), auth: false };
        assert!(unmet(Some(&bson!([{ "minServerVersion": "4.4" }])), &s).is_none());
        assert!(unmet(Some(&bson!([{ "minServerVersion": "8.0" }])), &s).is_some());
        assert!(unmet(Some(&bson!([{ "maxServerVersion": "3.3.99" }, { "topologies": ["sharded"] }])), &s).is_none());
        assert!(unmet(Some(&bson!([{ "topologies": ["single", "replicaset"] }])), &s).is_some());
        assert!(why_not(&doc! { "serverless": "forbid" }, &s).is_none());
    }
}
