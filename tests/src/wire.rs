//! A hand-rolled MongoDB wire-protocol client for sending what no driver would: malformed BSON,
//! truncated or oversized messages, garbage, and documents above the size limit.
//!
//! ```text
//!  header (16 B, little-endian): messageLength | requestID | responseTo | opCode
//!  OP_MSG (2013):  header | flagBits u32 | section+
//!                  section kind 0: BSON body      kind 1: i32 size | cstring id | BSON docs*
//! ```
//!
//! Every read has a deadline ([`REPLY_DEADLINE`]) so a server that hangs fails the test instead of
//! hanging it; the deadline detects hangs and is never a performance assertion.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use bson::Document;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const OP_REPLY: i32 = 1;
pub const OP_QUERY: i32 = 2004;
pub const OP_MSG: i32 = 2013;

/// OP_MSG flag bit 1: the sender expects no reply.
pub const MORE_TO_COME: u32 = 1 << 1;

pub const HEADER_LEN: usize = 16;

/// How long to wait for a reply or for the server to close before calling it a hang.
pub const REPLY_DEADLINE: Duration = Duration::from_secs(30);

/// Largest reply this client accepts (the server's maxMessageSizeBytes).
const REPLY_LEN_MAX: usize = 48_000_000;

/// What the server did after we sent something.
#[derive(Debug)]
pub enum Outcome {
    /// An OP_MSG reply: its `responseTo` and its body.
    Reply { response_to: i32, body: Document },
    /// The server closed the connection (EOF or reset).
    Closed,
}

pub struct WireConn {
    stream: TcpStream,
    next_request_id: i32,
}

impl WireConn {
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<WireConn> {
        let stream =
            tokio::time::timeout(REPLY_DEADLINE, TcpStream::connect(addr)).await.context("connect timed out")??;
        stream.set_nodelay(true)?;
        Ok(WireConn { stream, next_request_id: 1 })
    }

    /// [`WireConn::connect`], then, when the suite runs secured ([`crate::security`]),
    /// authenticated as root (created first if the cluster has no user yet).
    pub async fn connect_client(addr: SocketAddr) -> anyhow::Result<WireConn> {
        let mut conn = WireConn::connect(addr).await?;
        if crate::security::enabled() {
            let create = bson::doc! {
                "createUser": crate::security::ROOT_USER, "pwd": crate::security::ROOT_PASSWORD,
                "roles": ["root"], "$db": "admin",
            };
            let _ = conn.command(&create).await?;
            conn.authenticate(crate::security::ROOT_USER, crate::security::ROOT_PASSWORD, "admin").await?;
        }
        Ok(conn)
    }

    /// SCRAM-SHA-256 as `user` of `db`, with `saslStart` / `saslContinue`.
    pub async fn authenticate(&mut self, user: &str, password: &str, db: &str) -> anyhow::Result<()> {
        use shoal_auth::scram::Mechanism;
        use shoal_auth::scram::client::ClientConversation;
        let nonce: String = (0..24).map(|_| char::from(b'a' + rand::random::<u8>() % 26)).collect();
        let (mut scram, first) = ClientConversation::new(Mechanism::ScramSha256, user, password, &nonce);
        let binary = |bytes: Vec<u8>| bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes };
        let start = bson::doc! {
            "saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": binary(first),
            "options": { "skipEmptyExchange": true }, "$db": db,
        };
        let reply = self.command(&start).await?;
        let id = reply.get_i32("conversationId").with_context(|| format!("saslStart failed: {reply}"))?;
        let server_first = reply.get_binary_generic("payload").with_context(|| format!("saslStart: {reply}"))?;
        let last = scram.answer(server_first)?;
        let next = bson::doc! { "saslContinue": 1, "conversationId": id, "payload": binary(last), "$db": db };
        let reply = self.command(&next).await?;
        let server_final =
            reply.get_binary_generic("payload").with_context(|| format!("saslContinue failed: {reply}"))?;
        scram.verify(server_final)?;
        if !reply.get_bool("done").unwrap_or(false) {
            bail!("the server did not finish the conversation: {reply}");
        }
        Ok(())
    }

    /// A fresh request id for a message this connection is about to send.
    pub fn request_id(&mut self) -> i32 {
        let id = self.next_request_id;
        self.next_request_id += 1;
        id
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await
    }

    /// Half-closes: the server reads EOF after whatever was sent.
    pub async fn shutdown_write(&mut self) -> std::io::Result<()> {
        self.stream.shutdown().await
    }

    /// Sends `body` (which must carry `$db`) as an OP_MSG and returns the reply body.
    pub async fn command(&mut self, body: &Document) -> anyhow::Result<Document> {
        let id = self.request_id();
        self.send_raw(&op_msg(id, 0, &body.to_vec()?, &[])).await?;
        match self.next_outcome().await? {
            Outcome::Reply { response_to, body } => {
                if response_to != id {
                    bail!("reply to {response_to}, expected a reply to {id}: {body}");
                }
                Ok(body)
            }
            Outcome::Closed => bail!("server closed the connection instead of replying"),
        }
    }

    /// The next thing the server does: reply or close. Errs on a malformed reply or a hang.
    pub async fn next_outcome(&mut self) -> anyhow::Result<Outcome> {
        tokio::time::timeout(REPLY_DEADLINE, self.read_outcome())
            .await
            .with_context(|| format!("server neither replied nor closed within {REPLY_DEADLINE:?}"))?
    }

    /// Reads and discards replies until the server closes the connection. Errs on a hang.
    pub async fn expect_closed(&mut self) -> anyhow::Result<Vec<Document>> {
        let mut replies = Vec::new();
        loop {
            match self.next_outcome().await? {
                Outcome::Closed => return Ok(replies),
                Outcome::Reply { body, .. } => replies.push(body),
            }
        }
    }

    /// The next message of any opCode, or `None` if the server closed. Errs on a hang.
    pub async fn next_message(&mut self) -> anyhow::Result<Option<RawMessage>> {
        tokio::time::timeout(REPLY_DEADLINE, self.read_message())
            .await
            .with_context(|| format!("server neither replied nor closed within {REPLY_DEADLINE:?}"))?
    }

    async fn read_message(&mut self) -> anyhow::Result<Option<RawMessage>> {
        let mut header = [0u8; HEADER_LEN];
        match self.stream.read_exact(&mut header).await {
            Ok(_) => {}
            Err(e) if is_closed(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        let field = |i: usize| -> anyhow::Result<i32> { Ok(i32::from_le_bytes(header[i..i + 4].try_into()?)) };
        let len = usize::try_from(field(0)?).unwrap_or(0);
        if !(HEADER_LEN..=REPLY_LEN_MAX).contains(&len) {
            bail!("reply with bad messageLength {len}");
        }
        let mut payload = vec![0u8; len - HEADER_LEN];
        match self.stream.read_exact(&mut payload).await {
            Ok(_) => {}
            Err(e) if is_closed(&e) => bail!("connection closed in the middle of a reply"),
            Err(e) => return Err(e.into()),
        }
        Ok(Some(RawMessage { request_id: field(4)?, response_to: field(8)?, op_code: field(12)?, payload }))
    }

    async fn read_outcome(&mut self) -> anyhow::Result<Outcome> {
        let Some(message) = self.read_message().await? else {
            return Ok(Outcome::Closed);
        };
        if message.op_code != OP_MSG {
            bail!("reply with opCode {}, expected OP_MSG", message.op_code);
        }
        let body = parse_op_msg_reply(&message.payload)?;
        Ok(Outcome::Reply { response_to: message.response_to, body })
    }
}

/// One message as read off the socket, header fields split out.
#[derive(Debug)]
pub struct RawMessage {
    pub request_id: i32,
    pub response_to: i32,
    pub op_code: i32,
    /// Everything after the 16-byte header.
    pub payload: Vec<u8>,
}

/// The body of an OP_MSG reply, checking the shape drivers require: flags 0 or moreToCome, one
/// kind-0 section, no checksum.
pub fn parse_op_msg_reply(payload: &[u8]) -> anyhow::Result<Document> {
    if payload.len() < 5 + 5 {
        bail!("OP_MSG reply of {} bytes is too short", payload.len());
    }
    let flags = u32::from_le_bytes(payload[0..4].try_into()?);
    if flags & !MORE_TO_COME != 0 {
        bail!("reply with flagBits {flags:#x}: only moreToCome is allowed");
    }
    if payload[4] != 0 {
        bail!("reply's first section has kind {}, expected 0", payload[4]);
    }
    let body_bytes = &payload[5..];
    let body_len = i32::from_le_bytes(body_bytes[0..4].try_into()?);
    if usize::try_from(body_len).ok() != Some(body_bytes.len()) {
        bail!(
            "reply body is {body_len} bytes but the message holds {} after it: \
             replies carry exactly one kind-0 section and no checksum",
            body_bytes.len()
        );
    }
    Document::from_reader(body_bytes).context("reply body is not valid BSON")
}

/// The documents of an OP_REPLY payload (after the header): responseFlags, cursorID,
/// startingFrom, numberReturned, then the documents.
pub fn parse_op_reply(payload: &[u8]) -> anyhow::Result<(i32, Vec<Document>)> {
    if payload.len() < 20 {
        bail!("OP_REPLY of {} bytes is too short", payload.len());
    }
    let flags = i32::from_le_bytes(payload[0..4].try_into()?);
    let returned = i32::from_le_bytes(payload[16..20].try_into()?);
    let mut docs = Vec::new();
    let mut rest = &payload[20..];
    while !rest.is_empty() {
        let len = i32::from_le_bytes(rest.get(0..4).context("truncated document")?.try_into()?);
        let len = usize::try_from(len).context("negative document length")?;
        let bytes = rest.get(..len).context("document longer than the reply")?;
        docs.push(Document::from_reader(bytes)?);
        rest = &rest[len..];
    }
    if docs.len() != usize::try_from(returned).unwrap_or(usize::MAX) {
        bail!("OP_REPLY numberReturned {returned} but {} documents", docs.len());
    }
    Ok((flags, docs))
}

/// An OP_QUERY command (`numberToReturn -1`), as old drivers send their first handshake.
pub fn op_query(request_id: i32, full_collection_name: &str, query: &[u8]) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&0i32.to_le_bytes());
    payload.extend_from_slice(full_collection_name.as_bytes());
    payload.push(0);
    payload.extend_from_slice(&0i32.to_le_bytes());
    payload.extend_from_slice(&(-1i32).to_le_bytes());
    payload.extend_from_slice(query);
    let len = (HEADER_LEN + payload.len()) as i32;
    let mut msg = header(len, request_id, 0, OP_QUERY).to_vec();
    msg.extend_from_slice(&payload);
    msg
}

fn is_closed(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe)
}

/// A message header.
pub fn header(message_len: i32, request_id: i32, response_to: i32, op_code: i32) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&message_len.to_le_bytes());
    h[4..8].copy_from_slice(&request_id.to_le_bytes());
    h[8..12].copy_from_slice(&response_to.to_le_bytes());
    h[12..16].copy_from_slice(&op_code.to_le_bytes());
    h
}

/// An OP_MSG with a kind-0 section holding `body` (raw bytes, so they may be malformed) and one
/// kind-1 section per `(identifier, documents)`.
pub fn op_msg(request_id: i32, flags: u32, body: &[u8], sequences: &[(&str, &[Vec<u8>])]) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&flags.to_le_bytes());
    payload.push(0);
    payload.extend_from_slice(body);
    for (identifier, docs) in sequences {
        payload.push(1);
        let size = 4 + identifier.len() + 1 + docs.iter().map(Vec::len).sum::<usize>();
        payload.extend_from_slice(&(size as i32).to_le_bytes());
        payload.extend_from_slice(identifier.as_bytes());
        payload.push(0);
        for d in docs.iter() {
            payload.extend_from_slice(d);
        }
    }
    let len = (HEADER_LEN + payload.len()) as i32;
    let mut msg = header(len, request_id, 0, OP_MSG).to_vec();
    msg.extend_from_slice(&payload);
    msg
}

/// Deterministic pseudo-random bytes (an LCG), so a failing garbage test replays exactly.
pub fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as u8
        })
        .collect()
}

/// `ok` of a reply body as a number (servers send a double; accept any numeric type or bool).
pub fn ok_value(body: &Document) -> Option<f64> {
    match body.get("ok")? {
        bson::Bson::Double(f) => Some(*f),
        bson::Bson::Int32(i) => Some(f64::from(*i)),
        bson::Bson::Int64(i) => Some(*i as f64),
        bson::Bson::Boolean(b) => Some(if *b { 1.0 } else { 0.0 }),
        _ => None,
    }
}

/// True if `body` is an error reply in MongoDB's shape: `ok: 0` with an integer `code`, a string
/// `errmsg` and a string `codeName`.
pub fn is_error_reply(body: &Document) -> bool {
    ok_value(body) == Some(0.0)
        && matches!(body.get("code"), Some(bson::Bson::Int32(_) | bson::Bson::Int64(_)))
        && body.get_str("errmsg").is_ok()
        && body.get_str("codeName").is_ok()
}

/// A BSON document nested `depth` levels deep, built without recursion (so that building it
/// cannot overflow the test's own stack). Layer `i` (0 = outermost) is a document or array with
/// one element `(type, name) = layers[i % layers.len()]` holding layer `i + 1`; the innermost is
/// `{}`. E.g. `[(0x03, "a")]` gives `{a: {a: ... {}}}` and `[(0x04, "$and"), (0x03, "0")]` gives
/// `{$and: [{$and: [ ... ]}]}`.
pub fn deeply_nested(depth: usize, layers: &[(u8, &str)]) -> Vec<u8> {
    const EMPTY: [u8; 5] = [5, 0, 0, 0, 0];
    let layer = |i: usize| layers[i % layers.len()];
    let mut sizes = vec![0usize; depth + 1];
    sizes[depth] = EMPTY.len();
    for i in (0..depth).rev() {
        sizes[i] = 4 + 1 + layer(i).1.len() + 1 + sizes[i + 1] + 1;
    }
    let mut out = Vec::with_capacity(sizes[0]);
    for (i, size) in sizes.iter().enumerate().take(depth) {
        let (ty, name) = layer(i);
        out.extend_from_slice(&(*size as i32).to_le_bytes());
        out.push(ty);
        out.extend_from_slice(name.as_bytes());
        out.push(0);
    }
    out.extend_from_slice(&EMPTY);
    out.extend(std::iter::repeat_n(0u8, depth));
    out
}

/// `doc` (serialized) with one more embedded-document field `key` holding the raw bytes `value`.
pub fn with_raw_field(doc: &Document, key: &str, value: &[u8]) -> Vec<u8> {
    with_raw_element(doc, 0x03, key, value)
}

/// `doc` (serialized) with one more array field `key` whose elements are the raw documents
/// `elements`.
pub fn with_raw_array(doc: &Document, key: &str, elements: &[&[u8]]) -> Vec<u8> {
    let mut array = vec![0u8; 4];
    for (i, element) in elements.iter().enumerate() {
        array.push(0x03);
        array.extend_from_slice(i.to_string().as_bytes());
        array.push(0);
        array.extend_from_slice(element);
    }
    array.push(0);
    let len = array.len() as i32;
    array[0..4].copy_from_slice(&len.to_le_bytes());
    with_raw_element(doc, 0x04, key, &array)
}

fn with_raw_element(doc: &Document, element_type: u8, key: &str, value: &[u8]) -> Vec<u8> {
    let mut bytes = doc.to_vec().expect("serializable document");
    bytes.pop();
    bytes.push(element_type);
    bytes.extend_from_slice(key.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(value);
    bytes.push(0);
    let len = bytes.len() as i32;
    bytes[0..4].copy_from_slice(&len.to_le_bytes());
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deeply_nested_documents_parse_at_small_depth() {
        let d = Document::from_reader(&deeply_nested(3, &[(0x03, "a")])[..]).unwrap();
        assert_eq!(d, bson::doc! {"a": {"a": {"a": {}}}});
        let d = Document::from_reader(&deeply_nested(4, &[(0x04, "$and"), (0x03, "0")])[..]);
        assert_eq!(d.unwrap(), bson::doc! {"$and": [{"$and": [{}]}]});
        let body = with_raw_field(&bson::doc! {"find": "c"}, "filter", &deeply_nested(1, &[(0x03, "x")]));
        let d = Document::from_reader(&body[..]).unwrap();
        assert_eq!(d, bson::doc! {"find": "c", "filter": {"x": {}}});
        let stage = bson::doc! {"$match": {}}.to_vec().unwrap();
        let body = with_raw_array(&bson::doc! {"aggregate": "c"}, "pipeline", &[&stage, &stage]);
        let d = Document::from_reader(&body[..]).unwrap();
        assert_eq!(d, bson::doc! {"aggregate": "c", "pipeline": [{"$match": {}}, {"$match": {}}]});
    }
}
