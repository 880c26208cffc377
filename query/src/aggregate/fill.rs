//! `$fill {partitionBy | partitionByFields, sortBy, output: {field: {value} | {method}}}`, as
//! MongoDB desugars it: a `$setWindowFields` computing `$locf` / `$linearFill` for the `method`
//! outputs, then an `$addFields` of `{$ifNull: ["$field", value]}` for the `value` ones.
//!
//! Must not: run anything itself; it only rewrites the stage into the two it means.

use bson::{Bson, Document, doc};
use shoal_proto::ErrorCode;

use crate::error::{QueryError, Result};

fn bad(message: impl Into<String>) -> QueryError {
    QueryError::failed_to_parse(message)
}

/// The stages `$fill: arg` stands for.
pub(crate) fn desugar(arg: &Bson) -> Result<Vec<Bson>> {
    let Bson::Document(spec) = arg else { return Err(bad("The $fill stage specification must be an object")) };
    let (mut partition_by, mut sort_by, mut output) = (None, None, None);
    for (k, v) in spec {
        match (k.as_str(), v) {
            ("partitionBy", v) => {
                if partition_by.is_some() {
                    return Err(bad("Only one of 'partitionBy' and 'partitionByFields' can be specified for $fill"));
                }
                partition_by = Some(v.clone());
            }
            ("partitionByFields", Bson::Array(fields)) => {
                if partition_by.is_some() {
                    return Err(bad("Only one of 'partitionBy' and 'partitionByFields' can be specified for $fill"));
                }
                let mut key = Document::new();
                for (i, f) in fields.iter().enumerate() {
                    match f {
                        Bson::String(s) if !s.starts_with('$') && !s.is_empty() => {
                            key.insert(format!("_{i}"), format!("${s}"));
                        }
                        _ => return Err(bad("partitionByFields must be an array of field names")),
                    }
                }
                partition_by = Some(Bson::Document(key));
            }
            ("sortBy", Bson::Document(s)) => sort_by = Some(s.clone()),
            ("output", Bson::Document(o)) => output = Some(o.clone()),
            ("partitionByFields" | "sortBy" | "output", other) => {
                return Err(QueryError::type_mismatch(format!(
                    "BSON field '$fill.{k}' is the wrong type '{}'",
                    crate::display::type_name(other)
                )));
            }
            (other, _) => {
                return Err(QueryError::new(
                    ErrorCode::Location40415,
                    format!("BSON field '$fill.{other}' is an unknown field."),
                ));
            }
        }
    }
    let Some(output) = output else {
        return Err(QueryError::new(
            ErrorCode::Location40414,
            "BSON field '$fill.output' is missing but a required field",
        ));
    };
    let (mut windowed, mut values) = (Document::new(), Document::new());
    for (field, how) in &output {
        let Bson::Document(how) = how else { return Err(bad(format!("$fill output '{field}' must be an object"))) };
        match (how.get("value"), how.get("method"), how.len()) {
            (Some(v), None, 1) => {
                values.insert(field.clone(), doc! { "$ifNull": [format!("${field}"), v.clone()] });
            }
            (None, Some(Bson::String(m)), 1) if m == "locf" => {
                windowed.insert(field.clone(), doc! { "$locf": format!("${field}") });
            }
            (None, Some(Bson::String(m)), 1) if m == "linear" => {
                if sort_by.is_none() {
                    return Err(bad("The 'linear' method of $fill requires a sortBy"));
                }
                windowed.insert(field.clone(), doc! { "$linearFill": format!("${field}") });
            }
            (None, Some(m), 1) => {
                return Err(bad(format!("Method '{m}' is not supported for $fill; use locf or linear")));
            }
            _ => {
                return Err(bad(format!(
                    "Exactly one of 'value' and 'method' must be specified for $fill output '{field}'"
                )));
            }
        }
    }
    let mut stages = Vec::new();
    if !windowed.is_empty() {
        let mut swf = Document::new();
        if let Some(p) = partition_by {
            swf.insert("partitionBy", p);
        }
        if let Some(s) = sort_by {
            swf.insert("sortBy", s);
        }
        swf.insert("output", windowed);
        stages.push(Bson::Document(doc! { "$setWindowFields": swf }));
    } else if let Some(s) = sort_by {
        stages.push(Bson::Document(doc! { "$sort": s }));
    }
    if !values.is_empty() {
        stages.push(Bson::Document(doc! { "$addFields": values }));
    }
    Ok(stages)
}

#[cfg(test)]
mod tests {
    use bson::{Bson, bson, doc};

    use crate::aggregate::Pipeline;

    fn run(stage: Bson, docs: Vec<bson::Document>) -> crate::error::Result<Vec<bson::Document>> {
        Pipeline::parse(&[stage])?.run(docs.into_iter())
    }

    #[test]
    fn locf_linear_and_value() {
        let docs = vec![
            doc! {"t": 1, "a": 10, "b": 1, "c": Bson::Null},
            doc! {"t": 2},
            doc! {"t": 3, "a": Bson::Null},
            doc! {"t": 4, "a": 40, "b": 7},
        ];
        let out = run(
            bson!({"$fill": {"sortBy": {"t": 1}, "output": {
                "a": {"method": "linear"}, "b": {"method": "locf"}, "c": {"value": 0}}}}),
            docs,
        )
        .unwrap();
        assert_eq!(out[1], doc! {"t": 2, "a": 20.0, "b": 1, "c": 0});
        assert_eq!(out[2], doc! {"t": 3, "a": 30.0, "b": 1, "c": 0});
        assert_eq!(out[0], doc! {"t": 1, "a": 10, "b": 1, "c": 0});
    }

    #[test]
    fn bad_specs_are_refused() {
        for spec in [
            bson!({"$fill": {}}),
            bson!({"$fill": {"output": {"a": {"method": "avg"}}}}),
            bson!({"$fill": {"output": {"a": {"method": "linear"}}}}),
            bson!({"$fill": {"output": {"a": {"value": 1, "method": "locf"}}}}),
            bson!({"$fill": {"partitionBy": "$p", "partitionByFields": ["p"], "output": {"a": {"value": 1}}}}),
            bson!({"$fill": {"output": {"a": {"value": 1}}, "bogus": 1}}),
        ] {
            assert!(Pipeline::parse(std::slice::from_ref(&spec)).is_err(), "{spec}");
        }
    }
}
