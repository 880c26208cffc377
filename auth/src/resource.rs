//! What a command acts on ([`Target`]) and which privilege resources ([`Resource`], MongoDB's
//! resource documents) cover it.
//!
//! MongoDB's rules, which a role written for MongoDB relies on:
//! - `{db: "d", collection: ""}` covers database `d` and its *normal* collections (not `system.*`);
//! - `{db: "", collection: "c"}` covers collection `c` in every database, `system.*` included;
//! - `{db: "", collection: ""}` covers every normal collection and database except the internal
//!   databases `local` and `config`;
//! - `{cluster: true}` covers only the cluster; `{anyResource: true}` covers everything.
//!
//! Must not: decide which target a command has (the router's command table does).

pub use shoal_proto::catalog::Resource;

/// Databases `{db: "", collection: ""}` does not cover.
pub const INTERNAL_DATABASES: [&str; 2] = ["local", "config"];

/// What a command needs privileges on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    Cluster,
    Database(&'a str),
    Namespace { db: &'a str, collection: &'a str },
}

impl Target<'_> {
    /// The resources whose privileges apply to this target, most general first (MongoDB's
    /// resource search list). At most six.
    pub fn covering(&self) -> Vec<Resource> {
        let mut out = vec![Resource::AnyResource];
        match *self {
            Target::Cluster => out.push(Resource::Cluster),
            Target::Database(db) => {
                if !INTERNAL_DATABASES.contains(&db) {
                    out.push(any_normal());
                }
                out.push(namespace(db, ""));
            }
            Target::Namespace { db, collection } => {
                let system = collection.starts_with("system.");
                if !system {
                    if !INTERNAL_DATABASES.contains(&db) {
                        out.push(any_normal());
                    }
                    out.push(namespace(db, ""));
                }
                if collection.starts_with("system.buckets.") {
                    out.push(Resource::SystemBuckets { db: String::new() });
                    out.push(Resource::SystemBuckets { db: db.to_owned() });
                }
                out.push(namespace("", collection));
                out.push(namespace(db, collection));
            }
        }
        out
    }
}

impl std::fmt::Display for Target<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Cluster => f.write_str("the cluster"),
            Target::Database(db) => f.write_str(db),
            Target::Namespace { db, collection } => write!(f, "{db}.{collection}"),
        }
    }
}

fn any_normal() -> Resource {
    namespace("", "")
}

pub fn namespace(db: &str, collection: &str) -> Resource {
    Resource::Namespace { db: db.to_owned(), collection: collection.to_owned() }
}

/// Whether `resource` covers `target`.
pub fn covers(resource: &Resource, target: &Target<'_>) -> bool {
    target.covering().contains(resource)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns<'a>(db: &'a str, collection: &'a str) -> Target<'a> {
        Target::Namespace { db, collection }
    }

    #[test]
    fn database_patterns_cover_normal_collections_only() {
        let db = namespace("app", "");
        assert!(covers(&db, &ns("app", "people")));
        assert!(covers(&db, &Target::Database("app")));
        assert!(!covers(&db, &ns("app", "system.users")));
        assert!(!covers(&db, &ns("other", "people")));
        assert!(!covers(&db, &Target::Cluster));
    }

    #[test]
    fn any_normal_skips_internal_databases_and_system_collections() {
        let any = namespace("", "");
        assert!(covers(&any, &ns("app", "people")));
        assert!(covers(&any, &Target::Database("admin")));
        assert!(!covers(&any, &ns("config", "chunks")));
        assert!(!covers(&any, &ns("local", "oplog.rs")));
        assert!(!covers(&any, &ns("app", "system.js")));
        assert!(!covers(&any, &Target::Cluster));
    }

    #[test]
    fn collection_name_patterns_cover_every_database() {
        let users = namespace("", "system.users");
        assert!(covers(&users, &ns("admin", "system.users")));
        assert!(covers(&users, &ns("app", "system.users")));
        assert!(!covers(&users, &ns("app", "people")));
    }

    #[test]
    fn cluster_and_any_resource() {
        assert!(covers(&Resource::Cluster, &Target::Cluster));
        assert!(!covers(&Resource::Cluster, &ns("a", "b")));
        for t in [Target::Cluster, Target::Database("config"), ns("local", "x"), ns("a", "system.js")] {
            assert!(covers(&Resource::AnyResource, &t), "{t}");
        }
    }

    #[test]
    fn system_buckets() {
        let any = Resource::SystemBuckets { db: String::new() };
        assert!(covers(&any, &ns("m", "system.buckets.weather")));
        assert!(!covers(&any, &ns("m", "weather")));
        assert!(covers(&Resource::SystemBuckets { db: "m".into() }, &ns("m", "system.buckets.w")));
        assert!(!covers(&Resource::SystemBuckets { db: "n".into() }, &ns("m", "system.buckets.w")));
    }
}
