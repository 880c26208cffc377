//! Collection-level `bulkWrite`, which the Rust driver does not have (it has only the 8.0+
//! `Client::bulk_write`): the runner does what drivers do, as documented by the CRUD spec. It
//! validates updates and replacements client-side, splits the requests into `insert`, `update`
//! and `delete` commands (consecutive runs when ordered, one per kind when not), sends each with
//! `Database::run_command`, and builds the BulkWriteResult (or a BulkWriteException with the
//! first write error and the partial result).

use bson::{Bson, Document, doc, oid::ObjectId};

use crate::unified::errors::OpError;
use crate::unified::operations::OpResult;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Insert,
    Update,
    Delete,
}

struct Request {
    index: usize,
    kind: Kind,
    /// The document (insert), the update statement or the delete statement.
    body: Document,
}

#[derive(Default)]
struct Totals {
    inserted: i64,
    matched: i64,
    modified: i64,
    deleted: i64,
    upserted: Document,
    inserted_ids: Document,
}

impl Totals {
    fn result(&self) -> Bson {
        Bson::Document(doc! {
            "insertedCount": self.inserted,
            "matchedCount": self.matched,
            "modifiedCount": self.modified,
            "deletedCount": self.deleted,
            "upsertedCount": i64::try_from(self.upserted.len()).unwrap_or(0),
            "upsertedIds": self.upserted.clone(),
            "insertedIds": self.inserted_ids.clone(),
        })
    }
}

fn first_key_is_operator(d: &Document) -> bool {
    d.keys().next().is_some_and(|k| k.starts_with('$'))
}

fn statement(kind: &str, mut spec: Document) -> Result<Result<(Kind, Document), OpError>, String> {
    let filter = spec.remove("filter").unwrap_or(Bson::Document(doc! {}));
    let mut st = doc! { "q": filter };
    let (kind, body) = match kind {
        "insertOne" => {
            let mut d = spec.get_document("document").map_err(|_| "insertOne without document")?.clone();
            if !d.contains_key("_id") {
                let mut with_id = doc! { "_id": ObjectId::new() };
                with_id.extend(d);
                d = with_id;
            }
            return Ok(Ok((Kind::Insert, d)));
        }
        "updateOne" | "updateMany" => {
            let u = spec.remove("update").ok_or("update without update")?;
            if let Bson::Document(d) = &u
                && !first_key_is_operator(d)
            {
                return Ok(Err(OpError::client("update document must contain only atomic modifiers")));
            }
            st.insert("u", u);
            st.insert("multi", kind == "updateMany");
            (Kind::Update, spec)
        }
        "replaceOne" => {
            let r = spec.remove("replacement").ok_or("replaceOne without replacement")?;
            if let Bson::Document(d) = &r
                && first_key_is_operator(d)
            {
                return Ok(Err(OpError::client("replacement document must not contain update operators")));
            }
            st.insert("u", r);
            (Kind::Update, spec)
        }
        "deleteOne" | "deleteMany" => {
            st.insert("limit", i32::from(kind == "deleteOne"));
            (Kind::Delete, spec)
        }
        other => return Err(format!("bulkWrite request {other} not supported by the runner")),
    };
    for (k, v) in body {
        match k.as_str() {
            "upsert" | "arrayFilters" | "collation" | "hint" | "sort" => st.insert(k, v),
            other => return Err(format!("bulkWrite request field {other} not supported by the runner")),
        };
    }
    Ok(Ok((kind, st)))
}

pub async fn run(coll: &mongodb::Collection<Document>, mut args: Document) -> OpResult {
    let Some(Bson::Array(requests)) = args.remove("requests") else { return Err("bulkWrite without requests".into()) };
    args.remove("rawData");
    if !args.contains_key("writeConcern")
        && let Some(wc) = coll.write_concern()
    {
        args.insert("writeConcern", bson::serialize_to_bson(wc).map_err(|e| e.to_string())?);
    }
    let ordered = args.remove("ordered").and_then(|o| o.as_bool()).unwrap_or(true);
    let mut reqs = Vec::new();
    for (index, r) in requests.into_iter().enumerate() {
        let r = r.as_document().ok_or("request is not a document")?;
        let (kind, spec) = r.iter().next().ok_or("empty request")?;
        let spec = spec.as_document().ok_or("request spec is not a document")?.clone();
        match statement(kind, spec)? {
            Ok((kind, body)) => reqs.push(Request { index, kind, body }),
            Err(e) => return Ok(Err(e)),
        }
    }
    if reqs.is_empty() {
        return Ok(Err(OpError::client("bulkWrite with no requests")));
    }
    let mut batches: Vec<Vec<Request>> = Vec::new();
    if !ordered {
        reqs.sort_by_key(|r| (r.kind, r.index));
    }
    for r in reqs {
        match batches.last_mut() {
            Some(b) if b[0].kind == r.kind => b.push(r),
            _ => batches.push(vec![r]),
        }
    }
    let db = coll.client().database(&coll.namespace().db);
    let mut totals = Totals::default();
    let mut first_error: Option<OpError> = None;
    for batch in batches {
        let kind = batch[0].kind;
        let (verb, list) = match kind {
            Kind::Insert => ("insert", "documents"),
            Kind::Update => ("update", "updates"),
            Kind::Delete => ("delete", "deletes"),
        };
        let bodies: Vec<Bson> = batch.iter().map(|r| Bson::Document(r.body.clone())).collect();
        let mut cmd = doc! { verb: coll.name(), list: bodies, "ordered": ordered };
        for (k, v) in &args {
            match (k.as_str(), kind) {
                ("let", Kind::Insert) | ("bypassDocumentValidation", Kind::Delete) => {}
                ("let" | "comment" | "bypassDocumentValidation" | "writeConcern", _) => {
                    cmd.insert(k.clone(), v.clone());
                }
                (other, _) => return Err(format!("bulkWrite option {other} not supported by the runner")),
            }
        }
        let reply = match db.run_command(cmd).await {
            Ok(r) => r,
            Err(e) => {
                let mut e = OpError::from(e);
                e.partial = Some(totals.result());
                return Ok(Err(e));
            }
        };
        let n = reply.get("n").and_then(bson_i64).unwrap_or(0);
        let write_errors = reply.get_array("writeErrors").cloned().unwrap_or_default();
        let failed: Vec<i64> = write_errors
            .iter()
            .filter_map(|w| w.as_document().and_then(|w| w.get("index")).and_then(bson_i64))
            .collect();
        match kind {
            Kind::Insert => {
                totals.inserted += n;
                let stop = if ordered { failed.first().copied() } else { None };
                for (i, r) in batch.iter().enumerate() {
                    let i = i64::try_from(i).unwrap_or(i64::MAX);
                    if !failed.contains(&i) && stop.is_none_or(|s| i < s) {
                        totals
                            .inserted_ids
                            .insert(r.index.to_string(), r.body.get("_id").cloned().unwrap_or(Bson::Null));
                    }
                }
            }
            Kind::Update => {
                let upserted = reply.get_array("upserted").cloned().unwrap_or_default();
                for u in upserted.iter().filter_map(Bson::as_document) {
                    let i = u.get("index").and_then(bson_i64).and_then(|i| usize::try_from(i).ok()).unwrap_or(0);
                    let orig = batch.get(i).map_or(i, |r| r.index);
                    totals.upserted.insert(orig.to_string(), u.get("_id").cloned().unwrap_or(Bson::Null));
                }
                totals.matched += n - i64::try_from(upserted.len()).unwrap_or(0);
                totals.modified += reply.get("nModified").and_then(bson_i64).unwrap_or(0);
            }
            Kind::Delete => totals.deleted += n,
        }
        if let Some(w) = write_errors.first().and_then(Bson::as_document)
            && first_error.is_none()
        {
            first_error = Some(OpError {
                client: false,
                code: w.get("code").and_then(bson_i64).and_then(|c| i32::try_from(c).ok()),
                code_name: w.get_str("codeName").ok().map(str::to_owned),
                message: w.get_str("errmsg").unwrap_or_default().to_owned(),
                labels: Vec::new(),
                response: Some(reply.clone()),
                partial: None,
            });
        }
        if let Ok(wce) = reply.get_document("writeConcernError")
            && first_error.is_none()
        {
            first_error = Some(OpError {
                code: wce.get("code").and_then(bson_i64).and_then(|c| i32::try_from(c).ok()),
                code_name: wce.get_str("codeName").ok().map(str::to_owned),
                message: wce.get_str("errmsg").unwrap_or_default().to_owned(),
                response: Some(reply.clone()),
                ..OpError::default()
            });
        }
        if ordered && !write_errors.is_empty() {
            break;
        }
    }
    match first_error {
        Some(mut e) => {
            e.partial = Some(totals.result());
            Ok(Err(e))
        }
        None => Ok(Ok(Some(totals.result()))),
    }
}

fn bson_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        #[allow(clippy::cast_possible_truncation, reason = "counts the server sends as doubles are whole")]
        Bson::Double(d) => Some(*d as i64),
        _ => None,
    }
}
