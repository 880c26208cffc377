//! The on-disk format of `shoal dump`: mongodump's directory layout, so the files are what
//! MongoDB's tools read and write.
//!
//! ```text
//!  OUT/<db>/<collection>.bson           documents back to back, each a BSON document
//!  OUT/<db>/<collection>.metadata.json  canonical extended JSON: {options, indexes, uuid,
//!                                       collectionName, type, shardKey?, shardKeyUnique?}
//!  OUT/admin/system.users.bson          users with their stored SCRAM credentials
//!  OUT/admin/system.roles.bson          user-defined roles
//! ```
//!
//! `shardKey` / `shardKeyUnique` are Shoal's: the key a sharded collection is restored with
//! (mongorestore ignores fields it does not know). Must not: hold a collection in memory (files
//! are written and read one document at a time).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use bson::{Bson, Document, RawDocumentBuf, doc};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};

/// The largest document a `.bson` file may hold: MongoDB's 16 MiB plus the internal headroom it
/// allows for documents written by the server itself.
pub const DOCUMENT_BYTES_MAX: usize = 16 * 1024 * 1024 + 16 * 1024;

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

/// Writes documents to a `.bson` file as they arrive.
pub struct BsonWriter {
    out: BufWriter<tokio::fs::File>,
    pub count: u64,
    pub bytes: u64,
}

impl BsonWriter {
    pub async fn create(path: &Path) -> anyhow::Result<BsonWriter> {
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir).await.with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let file = tokio::fs::File::create(path).await.with_context(|| format!("cannot create {}", path.display()))?;
        Ok(BsonWriter { out: BufWriter::new(file), count: 0, bytes: 0 })
    }

    pub async fn write(&mut self, document: &[u8]) -> anyhow::Result<()> {
        self.out.write_all(document).await?;
        self.count += 1;
        self.bytes += document.len() as u64;
        Ok(())
    }

    /// Flushes and syncs the file.
    pub async fn finish(mut self) -> anyhow::Result<()> {
        self.out.flush().await?;
        self.out.get_ref().sync_all().await?;
        Ok(())
    }
}

/// Reads a `.bson` file one document at a time.
pub struct BsonReader {
    input: BufReader<tokio::fs::File>,
    path: PathBuf,
    offset: u64,
}

impl BsonReader {
    pub async fn open(path: &Path) -> anyhow::Result<BsonReader> {
        let file = tokio::fs::File::open(path).await.with_context(|| format!("cannot open {}", path.display()))?;
        Ok(BsonReader { input: BufReader::new(file), path: path.to_owned(), offset: 0 })
    }

    /// The next document, or `None` at the end of the file. A truncated or corrupt document is
    /// an error naming the file and offset.
    pub async fn next(&mut self) -> anyhow::Result<Option<RawDocumentBuf>> {
        let mut length = [0u8; 4];
        match self.input.read(&mut length[..1]).await? {
            0 => return Ok(None),
            _ => self.input.read_exact(&mut length[1..]).await.map_err(|_| self.corrupt("truncated length"))?,
        };
        let len = i32::from_le_bytes(length);
        let len = usize::try_from(len).map_err(|_| self.corrupt("negative length"))?;
        if !(5..=DOCUMENT_BYTES_MAX).contains(&len) {
            return Err(self.corrupt(&format!("a document of {len} bytes")));
        }
        let mut bytes = vec![0u8; len];
        bytes[..4].copy_from_slice(&length);
        self.input.read_exact(&mut bytes[4..]).await.map_err(|_| self.corrupt("truncated document"))?;
        let document = RawDocumentBuf::from_bytes(bytes).map_err(|e| self.corrupt(&e.to_string()))?;
        self.offset += len as u64;
        Ok(Some(document))
    }

    fn corrupt(&self, what: &str) -> anyhow::Error {
        anyhow::anyhow!("{} is corrupt at byte {}: {what}", self.path.display(), self.offset)
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

    #[tokio::test]
    async fn documents_round_trip_and_a_truncated_file_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (bson_path, _) = paths(dir.path(), "db", "c").expect("paths");
        let mut writer = BsonWriter::create(&bson_path).await.expect("create");
        for i in 0..3 {
            let raw = RawDocumentBuf::try_from(&doc! { "_id": i, "s": "x".repeat(i as usize * 10) }).expect("raw");
            writer.write(raw.as_bytes()).await.expect("write");
        }
        assert_eq!(writer.count, 3);
        writer.finish().await.expect("finish");
        let mut reader = BsonReader::open(&bson_path).await.expect("open");
        let mut ids = Vec::new();
        while let Some(d) = reader.next().await.expect("next") {
            ids.push(d.get_i32("_id").expect("_id"));
        }
        assert_eq!(ids, [0, 1, 2]);

        let bytes = std::fs::read(&bson_path).expect("read");
        std::fs::write(&bson_path, &bytes[..bytes.len() - 3]).expect("truncate");
        let mut reader = BsonReader::open(&bson_path).await.expect("open");
        let mut outcome = Ok(None);
        for _ in 0..3 {
            outcome = reader.next().await;
        }
        let error = outcome.expect_err("truncated").to_string();
        assert!(error.contains("corrupt") && error.contains("truncated"), "{error}");
        assert!(paths(dir.path(), "db", "a/b").is_err());
    }
}
