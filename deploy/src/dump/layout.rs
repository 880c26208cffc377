//! The on-disk format of `shoal dump`: mongodump's directory layout, so the files are what
//! MongoDB's tools read and write.
//!
//! ```text
//!  OUT/<db>/<collection>.bson           documents back to back, each a BSON document
//!  OUT/<db>/<collection>.metadata.json  canonical extended JSON: {options, indexes, uuid,
//!                                       collectionName, type, shardKey?, shardKeyUnique?}
//!  OUT/admin/system.users.bson          users with their stored SCRAM credentials
//!  OUT/admin/system.roles.bson          user-defined roles
//!  (each file with .gz appended, gzip-compressed, with --gzip)
//! ```
//!
//! `shardKey` / `shardKeyUnique` are Shoal's: the key a sharded collection is restored with
//! (mongorestore ignores fields it does not know). The `.bson` files themselves are
//! [`super::bson_file`]'s.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use bson::{Bson, Document, doc};

/// `OUT/<db>/<coll>.bson` and `.metadata.json`. Names that cannot be file names are refused
/// (mongodump escapes them; Shoal's names never need it in practice).
pub fn paths(out: &Path, db: &str, coll: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
    for name in [db, coll] {
        if name.is_empty() || name.contains('/') || name.contains('\0') || name == "." || name == ".." {
            bail!("{db}.{coll}: the name cannot be a file name");
        }
    }
    let dir = out.join(db);
    Ok((dir.join(format!("{coll}.bson")), dir.join(format!("{coll}.metadata.json"))))
}

/// What mongodump records about a collection, plus the shard key Shoal restores it with.
#[derive(Debug, Clone, PartialEq)]
pub struct Metadata {
    pub collection: String,
    pub options: Document,
    /// As `listIndexes` gives them.
    pub indexes: Vec<Document>,
    /// The collection's UUID, hex as mongodump writes it.
    pub uuid: Option<String>,
    pub shard_key: Option<Document>,
    pub shard_key_unique: bool,
}

impl Metadata {
    pub fn to_json(&self) -> String {
        let mut d = doc! {
            "options": self.options.clone(),
            "indexes": self.indexes.iter().cloned().map(Bson::Document).collect::<Vec<_>>(),
            "collectionName": &self.collection,
            "type": "collection",
        };
        if let Some(uuid) = &self.uuid {
            d.insert("uuid", uuid);
        }
        if let Some(key) = &self.shard_key {
            d.insert("shardKey", key.clone());
            d.insert("shardKeyUnique", self.shard_key_unique);
        }
        Bson::Document(d).into_canonical_extjson().to_string()
    }

    pub fn from_json(text: &str) -> anyhow::Result<Metadata> {
        let value: serde_json::Value = serde_json::from_str(text).context("not JSON")?;
        let Bson::Document(d) = Bson::try_from(value).context("not extended JSON")? else {
            bail!("not a JSON object");
        };
        let indexes = match d.get("indexes") {
            Some(Bson::Array(list)) => list.iter().filter_map(|i| i.as_document().cloned()).collect(),
            _ => Vec::new(),
        };
        Ok(Metadata {
            collection: d.get_str("collectionName").unwrap_or_default().to_owned(),
            options: d.get_document("options").cloned().unwrap_or_default(),
            indexes,
            uuid: d.get_str("uuid").ok().map(str::to_owned),
            shard_key: d.get_document("shardKey").ok().cloned(),
            shard_key_unique: d.get_bool("shardKeyUnique").unwrap_or(false),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_canonical_extended_json_and_reads_back() {
        let metadata = Metadata {
            collection: "orders".into(),
            options: doc! {},
            indexes: vec![doc! { "v": 2, "key": { "_id": 1 }, "name": "_id_" }],
            uuid: Some("0123456789abcdef0123456789abcdef".into()),
            shard_key: Some(doc! { "customer": "hashed" }),
            shard_key_unique: false,
        };
        let text = metadata.to_json();
        assert!(text.contains(r#""v":{"$numberInt":"2"}"#), "{text}");
        assert!(text.contains(r#""collectionName":"orders""#) && text.contains(r#""type":"collection""#), "{text}");
        assert_eq!(Metadata::from_json(&text).expect("reads back"), metadata);
        assert!(Metadata::from_json("[1]").is_err());
    }

    #[test]
    fn names_that_cannot_be_file_names_are_refused() {
        assert!(paths(Path::new("out"), "db", "a/b").is_err());
        assert!(paths(Path::new("out"), "..", "c").is_err());
        assert!(paths(Path::new("out"), "db", "c").is_ok());
    }
}
