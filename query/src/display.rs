//! MongoDB's way of printing values inside error messages (`{_id: 1}`, `{ a: [ 1, 2 ] }`) and
//! its type names (`"int"`, `"long"`, `"object"`).
//!
//! Owns only formatting. Messages are part of the compatibility surface: drivers and tests match
//! on them, so this follows `BSONElement::toString` and `typeName` rather than bson's `Display`.

use bson::{Bson, Document};

/// The name `$type` reports and error messages use.
pub fn type_name(v: &Bson) -> &'static str {
    match v {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Binary(_) => "binData",
        Bson::Undefined => "undefined",
        Bson::ObjectId(_) => "objectId",
        Bson::Boolean(_) => "bool",
        Bson::DateTime(_) => "date",
        Bson::Null => "null",
        Bson::RegularExpression(_) => "regex",
        Bson::DbPointer(_) => "dbPointer",
        Bson::JavaScriptCode(_) => "javascript",
        Bson::Symbol(_) => "symbol",
        Bson::JavaScriptCodeWithScope(_) => "javascriptWithScope",
        Bson::Int32(_) => "int",
        Bson::Timestamp(_) => "timestamp",
        Bson::Int64(_) => "long",
        Bson::Decimal128(_) => "decimal",
        Bson::MinKey => "minKey",
        Bson::MaxKey => "maxKey",
    }
}

/// `name: value`, as `BSONElement::toString` prints an element.
pub fn element(name: &str, v: &Bson) -> String {
    format!("{name}: {}", value(v))
}

pub fn value(v: &Bson) -> String {
    let mut out = String::new();
    write_value(&mut out, v);
    out
}

pub fn document(d: &Document) -> String {
    let mut out = String::new();
    write_document(&mut out, d);
    out
}

fn write_document(out: &mut String, d: &Document) {
    if d.is_empty() {
        out.push_str("{}");
        return;
    }
    out.push_str("{ ");
    for (i, (k, v)) in d.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(k);
        out.push_str(": ");
        write_value(out, v);
    }
    out.push_str(" }");
}

fn write_value(out: &mut String, v: &Bson) {
    use std::fmt::Write;
    // Writing into a String cannot fail; the results are ignored for that reason.
    match v {
        Bson::Double(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e15 => {
            let _ = write!(out, "{f:.1}");
        }
        Bson::Double(f) => {
            let _ = write!(out, "{f}");
        }
        Bson::String(s) => {
            let _ = write!(out, "\"{s}\"");
        }
        Bson::Document(d) => write_document(out, d),
        Bson::Array(a) => {
            if a.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push_str("[ ");
            for (i, e) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, e);
            }
            out.push_str(" ]");
        }
        Bson::Boolean(b) => {
            let _ = write!(out, "{b}");
        }
        Bson::Null => out.push_str("null"),
        Bson::Undefined => out.push_str("undefined"),
        Bson::Int32(i) => {
            let _ = write!(out, "{i}");
        }
        Bson::Int64(i) => {
            let _ = write!(out, "{i}");
        }
        Bson::ObjectId(o) => {
            let _ = write!(out, "ObjectId('{}')", o.to_hex());
        }
        Bson::DateTime(d) => {
            let _ = write!(out, "new Date({})", d.timestamp_millis());
        }
        Bson::Timestamp(t) => {
            let _ = write!(out, "Timestamp({}, {})", t.time, t.increment);
        }
        Bson::RegularExpression(re) => {
            let _ = write!(out, "/{}/{}", re.pattern.as_str(), re.options.as_str());
        }
        Bson::Decimal128(d) => {
            let _ = write!(out, "NumberDecimal(\"{d}\")");
        }
        Bson::Binary(b) => {
            let _ = write!(out, "BinData({}, ", u8::from(b.subtype));
            for byte in &b.bytes {
                let _ = write!(out, "{byte:02X}");
            }
            out.push(')');
        }
        Bson::JavaScriptCode(c) | Bson::Symbol(c) => out.push_str(c),
        Bson::JavaScriptCodeWithScope(c) => out.push_str(&c.code),
        Bson::MinKey => out.push_str("MinKey"),
        Bson::MaxKey => out.push_str("MaxKey"),
        Bson::DbPointer(_) => out.push_str("DBRef(...)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn prints_like_mongodb() {
        assert_eq!(element("a", &Bson::Int32(1)), "a: 1");
        assert_eq!(element("a", &Bson::String("x".into())), "a: \"x\"");
        assert_eq!(value(&Bson::Double(2.0)), "2.0");
        assert_eq!(value(&Bson::Double(2.5)), "2.5");
        assert_eq!(value(&bson::bson!({"a": [1, {"b": null}]})), "{ a: [ 1, { b: null } ] }");
        assert_eq!(value(&bson::bson!([])), "[]");
        assert_eq!(document(&doc! {"_id": 1, "a": "x"}), "{ _id: 1, a: \"x\" }");
        assert_eq!(type_name(&Bson::Int64(1)), "long");
    }
}
