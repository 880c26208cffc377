//! `.bson` files as mongodump writes them: BSON documents back to back, gzip-compressed when the
//! name ends in `.gz` (`--gzip`). Written as documents arrive and read one document at a time.
//!
//! Must not: hold more than a batch of a file in memory (gzip output is flushed every
//! [`FLUSH_BYTES`], input is inflated [`READ_CHUNK`] compressed bytes at a time), or accept a
//! truncated or corrupt file silently (the error names the file and the byte offset).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use bson::RawDocumentBuf;
use flate2::Compression;
use flate2::write::{GzDecoder, GzEncoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};

/// The largest document a `.bson` file may hold: MongoDB's 16 MiB plus the internal headroom it
/// allows for documents written by the server itself.
pub const DOCUMENT_BYTES_MAX: usize = 16 * 1024 * 1024 + 16 * 1024;
/// Compressed bytes kept before they go to the file.
const FLUSH_BYTES: usize = 256 * 1024;
/// Bytes read from the file at a time (compressed ones inflate at most about a thousandfold).
const READ_CHUNK: usize = 8 * 1024;

/// `path` with `.gz` appended.
pub fn gz(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".gz");
    PathBuf::from(name)
}

/// The file a dump holds for `path`: `path` itself, else `path.gz`, else `None`.
pub fn existing(path: &Path) -> Option<PathBuf> {
    [path.to_owned(), gz(path)].into_iter().find(|p| p.is_file())
}

/// Writes documents to a `.bson` (or `.bson.gz`) file as they arrive.
pub struct BsonWriter {
    out: BufWriter<tokio::fs::File>,
    gzip: Option<GzEncoder<Vec<u8>>>,
    pub count: u64,
    /// Uncompressed bytes.
    pub bytes: u64,
}

impl BsonWriter {
    /// Creates `path`, or `path.gz` compressed if `gzip`.
    pub async fn create(path: &Path, gzip: bool) -> anyhow::Result<BsonWriter> {
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir).await.with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let path = if gzip { gz(path) } else { path.to_owned() };
        let file = tokio::fs::File::create(&path).await.with_context(|| format!("cannot create {}", path.display()))?;
        let gzip = gzip.then(|| GzEncoder::new(Vec::new(), Compression::default()));
        Ok(BsonWriter { out: BufWriter::new(file), gzip, count: 0, bytes: 0 })
    }

    pub async fn write(&mut self, document: &[u8]) -> anyhow::Result<()> {
        match &mut self.gzip {
            None => self.out.write_all(document).await?,
            Some(encoder) => {
                encoder.write_all(document)?;
                if encoder.get_ref().len() >= FLUSH_BYTES {
                    self.out.write_all(encoder.get_ref()).await?;
                    // The encoder only appends to its output, so what was written may go.
                    encoder.get_mut().clear();
                }
            }
        }
        self.count += 1;
        self.bytes += document.len() as u64;
        Ok(())
    }

    /// Ends the gzip stream, flushes and syncs the file.
    pub async fn finish(mut self) -> anyhow::Result<()> {
        if let Some(encoder) = self.gzip.take() {
            let rest = encoder.finish()?;
            self.out.write_all(&rest).await?;
        }
        self.out.flush().await?;
        self.out.get_ref().sync_all().await?;
        Ok(())
    }
}

/// Reads a `.bson` (or `.bson.gz`) file one document at a time.
pub struct BsonReader {
    file: tokio::fs::File,
    gzip: Option<GzDecoder<Vec<u8>>>,
    path: PathBuf,
    /// Uncompressed bytes not handed out yet start at `start`.
    pending: Vec<u8>,
    start: usize,
    at_end: bool,
    /// Uncompressed offset of `pending[start]` in the file.
    offset: u64,
}

impl BsonReader {
    /// Opens `path`, inflating it if its name ends in `.gz`.
    pub async fn open(path: &Path) -> anyhow::Result<BsonReader> {
        let file = tokio::fs::File::open(path).await.with_context(|| format!("cannot open {}", path.display()))?;
        let gzip = path.extension().is_some_and(|e| e == "gz").then(|| GzDecoder::new(Vec::new()));
        Ok(BsonReader { file, gzip, path: path.to_owned(), pending: Vec::new(), start: 0, at_end: false, offset: 0 })
    }

    /// The next document, or `None` at the end of the file. A truncated or corrupt document is
    /// an error naming the file and offset.
    pub async fn next(&mut self) -> anyhow::Result<Option<RawDocumentBuf>> {
        if !self.fill(4).await? {
            return match self.available() {
                0 => Ok(None),
                _ => Err(self.corrupt("truncated length")),
            };
        }
        let length: [u8; 4] = self.pending[self.start..self.start + 4].try_into()?;
        let len = usize::try_from(i32::from_le_bytes(length)).map_err(|_| self.corrupt("negative length"))?;
        if !(5..=DOCUMENT_BYTES_MAX).contains(&len) {
            return Err(self.corrupt(&format!("a document of {len} bytes")));
        }
        if !self.fill(len).await? {
            return Err(self.corrupt("truncated document"));
        }
        let bytes = self.pending[self.start..self.start + len].to_vec();
        let document = RawDocumentBuf::from_bytes(bytes).map_err(|e| self.corrupt(&e.to_string()))?;
        self.start += len;
        self.offset += len as u64;
        Ok(Some(document))
    }

    fn available(&self) -> usize {
        self.pending.len() - self.start
    }

    /// Reads until `want` bytes are pending; false if the file ends first.
    async fn fill(&mut self, want: usize) -> anyhow::Result<bool> {
        if self.start > 0 && self.available() < want {
            self.pending.drain(..self.start);
            self.start = 0;
        }
        let mut chunk = vec![0u8; READ_CHUNK];
        while self.available() < want {
            if self.at_end {
                return Ok(false);
            }
            let n = self.file.read(&mut chunk).await.with_context(|| format!("reading {}", self.path.display()))?;
            match (&mut self.gzip, n) {
                (None, 0) => self.at_end = true,
                (None, n) => self.pending.extend_from_slice(&chunk[..n]),
                (Some(decoder), 0) => {
                    self.at_end = true;
                    decoder.try_finish().map_err(|e| self.corrupt_gzip(&e))?;
                    self.take_inflated();
                }
                (Some(decoder), n) => {
                    decoder.write_all(&chunk[..n]).map_err(|e| self.corrupt_gzip(&e))?;
                    self.take_inflated();
                }
            }
        }
        Ok(true)
    }

    fn take_inflated(&mut self) {
        if let Some(decoder) = &mut self.gzip {
            self.pending.append(decoder.get_mut());
        }
    }

    fn corrupt_gzip(&self, e: &std::io::Error) -> anyhow::Error {
        anyhow::anyhow!("{} is not a complete gzip file (near byte {} inflated): {e}", self.path.display(), self.offset)
    }

    fn corrupt(&self, what: &str) -> anyhow::Error {
        anyhow::anyhow!("{} is corrupt at byte {}: {what}", self.path.display(), self.offset)
    }
}

/// Writes a small file (metadata), compressed to `path.gz` if `gzip`.
pub async fn write_small(path: &Path, text: &str, gzip: bool) -> anyhow::Result<()> {
    let (path, bytes) = if gzip {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(text.as_bytes())?;
        (gz(path), encoder.finish()?)
    } else {
        (path.to_owned(), text.as_bytes().to_vec())
    };
    tokio::fs::write(&path, bytes).await.with_context(|| format!("cannot write {}", path.display()))
}

/// Reads a small file `write_small` wrote (`path` or `path.gz`); `None` if neither exists.
pub async fn read_small(path: &Path) -> anyhow::Result<Option<String>> {
    let Some(found) = existing(path) else { return Ok(None) };
    let bytes = tokio::fs::read(&found).await.with_context(|| format!("cannot read {}", found.display()))?;
    if found == path {
        return Ok(Some(String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8", found.display()))?));
    }
    let mut decoder = GzDecoder::new(Vec::new());
    decoder.write_all(&bytes).and_then(|_| decoder.try_finish()).with_context(|| format!("{}", found.display()))?;
    let text = std::mem::take(decoder.get_mut());
    match String::from_utf8(text) {
        Ok(text) => Ok(Some(text)),
        Err(_) => bail!("{} is not UTF-8", found.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    async fn write_three(path: &Path, gzip: bool) {
        let mut writer = BsonWriter::create(path, gzip).await.expect("create");
        for i in 0..3 {
            let raw = RawDocumentBuf::try_from(&doc! { "_id": i, "s": "x".repeat(i as usize * 10) }).expect("raw");
            writer.write(raw.as_bytes()).await.expect("write");
        }
        assert_eq!(writer.count, 3);
        writer.finish().await.expect("finish");
    }

    async fn read_all(path: &Path) -> anyhow::Result<Vec<i32>> {
        let mut reader = BsonReader::open(path).await?;
        let mut ids = Vec::new();
        while let Some(d) = reader.next().await? {
            ids.push(d.get_i32("_id")?);
        }
        Ok(ids)
    }

    #[tokio::test]
    async fn documents_round_trip_and_a_truncated_file_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db/c.bson");
        write_three(&path, false).await;
        assert_eq!(existing(&path), Some(path.clone()));
        assert_eq!(read_all(&path).await.expect("reads"), [0, 1, 2]);

        let bytes = std::fs::read(&path).expect("read");
        std::fs::write(&path, &bytes[..bytes.len() - 3]).expect("truncate");
        let error = read_all(&path).await.expect_err("truncated").to_string();
        assert!(error.contains("corrupt") && error.contains("truncated document"), "{error}");
        std::fs::write(&path, &bytes[..bytes.len() - 1 - bytes.len() % 7]).expect("truncate");
        assert!(read_all(&path).await.is_err());
    }

    #[tokio::test]
    async fn gzip_files_round_trip_and_a_truncated_one_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db/c.bson");
        write_three(&path, true).await;
        let found = existing(&path).expect("c.bson.gz");
        assert!(found.display().to_string().ends_with("c.bson.gz"), "{}", found.display());
        assert_eq!(read_all(&found).await.expect("reads"), [0, 1, 2]);
        let bytes = std::fs::read(&found).expect("read");
        assert_eq!(&bytes[..2], [0x1f, 0x8b], "a gzip member");
        // Cut in the trailer: every document is there, but the file is not whole.
        std::fs::write(&found, &bytes[..bytes.len() - 2]).expect("truncate");
        let error = read_all(&found).await.expect_err("truncated").to_string();
        assert!(error.contains("gzip") || error.contains("truncated"), "{error}");

        // Past the flush threshold (incompressible bytes), read back across many chunks.
        let big = dir.path().join("db/big.bson");
        let mut writer = BsonWriter::create(&big, true).await.expect("create");
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for i in 0..400 {
            let noise: Vec<u8> = (0..1024)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let d =
                doc! { "_id": i, "noise": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: noise } };
            writer.write(RawDocumentBuf::try_from(&d).expect("raw").as_bytes()).await.expect("write");
        }
        writer.finish().await.expect("finish");
        assert!(std::fs::metadata(gz(&big)).expect("big.bson.gz").len() > FLUSH_BYTES as u64);
        assert_eq!(read_all(&gz(&big)).await.expect("reads"), (0..400).collect::<Vec<i32>>());

        write_small(&dir.path().join("m.json"), "{\"a\":1}", true).await.expect("write");
        assert_eq!(read_small(&dir.path().join("m.json")).await.expect("read").as_deref(), Some("{\"a\":1}"));
        assert_eq!(read_small(&dir.path().join("none.json")).await.expect("read"), None);
    }
}
