//! Stages built from other stages or that hold their whole input: `$facet` (sub-pipelines over
//! the same input), `$bucket` (desugared, as MongoDB does, into `$group` on a `$switch` over the
//! boundaries, then `$sort`), and `$sample` (a uniform sample without replacement).
//!
//! Invariants: `$facet` and `$sample` hold their input within the pipeline's memory budget;
//! `$bucket` boundaries are strictly ascending values of one canonical type, and its `default`
//! lies outside them.

use bson::{Bson, Document, doc};

use super::{DocStream, Pipeline, doc_size};
use crate::error::{QueryError, Result};
use crate::order::{canonical_type, compare_values};

/// `$facet: {name: [stages], …}`.
pub(crate) fn parse_facet(spec: &Document) -> Result<Vec<(String, Pipeline)>> {
    if spec.is_empty() {
        // MongoDB: Location40169.
        return Err(QueryError::bad_value("the $facet specification must be a non-empty object"));
    }
    let mut facets = Vec::new();
    for (name, stages) in spec {
        let Bson::Array(stages) = stages else {
            // MongoDB: Location40170.
            return Err(QueryError::failed_to_parse(format!(
                "arguments to $facet must be arrays, {name} is type {}",
                crate::display::type_name(stages)
            )));
        };
        let pipeline = Pipeline::parse(stages)?;
        if let Some(bad) = pipeline.stage_names().into_iter().find(|n| matches!(*n, "$facet" | "$out" | "$merge")) {
            // MongoDB: Location40600.
            return Err(QueryError::bad_value(format!("{bad} is not allowed to be used within a $facet stage")));
        }
        facets.push((name.clone(), pipeline));
    }
    Ok(facets)
}

/// Runs every facet over the whole input: one document `{name: [results], …}`.
pub(crate) fn run_facet(
    facets: &[(String, Pipeline)],
    input: DocStream<'_>,
    budget: super::Budget,
) -> Result<Vec<Document>> {
    let docs = hold(input, budget, "$facet")?;
    let mut out = Document::new();
    for (name, pipeline) in facets {
        let results = pipeline.run(docs.iter().cloned())?;
        out.insert(name.clone(), results.into_iter().map(Bson::Document).collect::<Vec<_>>());
    }
    Ok(vec![out])
}

/// `$sample: {size}`.
pub(crate) fn parse_sample(arg: &Bson) -> Result<u64> {
    let Bson::Document(spec) = arg else {
        // MongoDB: Location28745.
        return Err(QueryError::failed_to_parse("the $sample stage specification must be an object"));
    };
    let size = match spec.get("size") {
        Some(Bson::Int32(n)) if *n >= 0 => *n as u64,
        Some(Bson::Int64(n)) if *n >= 0 => *n as u64,
        Some(Bson::Double(f)) if *f >= 0.0 && f.fract() == 0.0 => *f as u64,
        // MongoDB: Location28746 / 28747.
        _ => return Err(QueryError::bad_value("size argument to $sample must be a non-negative number")),
    };
    if spec.len() != 1 {
        return Err(QueryError::failed_to_parse("unrecognized option to $sample"));
    }
    Ok(size)
}

/// Reservoir sampling: every input document is equally likely to be among the `size` returned.
pub(crate) fn run_sample(size: u64, input: DocStream<'_>, budget: super::Budget) -> Result<Vec<Document>> {
    let k = usize::try_from(size).unwrap_or(usize::MAX);
    let mut reservoir: Vec<Document> = Vec::new();
    let mut bytes = 0usize;
    for (seen, r) in input.enumerate() {
        let d = r?;
        if reservoir.len() < k {
            bytes = bytes.saturating_add(doc_size(&d));
            reservoir.push(d);
        } else {
            let j = rand::random_range(0..=seen);
            if j < k {
                bytes = bytes.saturating_add(doc_size(&d)).saturating_sub(doc_size(&reservoir[j]));
                reservoir[j] = d;
            }
        }
        check_budget(bytes, budget, "$sample")?;
    }
    // The reservoir keeps input order for its first k; shuffle so the output order is random too.
    for i in (1..reservoir.len()).rev() {
        reservoir.swap(i, rand::random_range(0..=i));
    }
    Ok(reservoir)
}

/// `$bucket: {groupBy, boundaries, default, output}` as the `$group` and `$sort` specifications
/// MongoDB desugars it into.
pub(crate) fn bucket_as_group(arg: &Bson) -> Result<(Bson, Document)> {
    let Bson::Document(spec) = arg else {
        // MongoDB: Location40201.
        return Err(QueryError::failed_to_parse("Argument to $bucket stage must be an object"));
    };
    for k in spec.keys() {
        if !matches!(k.as_str(), "groupBy" | "boundaries" | "default" | "output") {
            // MongoDB: Location40197.
            return Err(QueryError::failed_to_parse(format!("Unrecognized option to $bucket: {k}.")));
        }
    }
    let group_by = match spec.get("groupBy") {
        Some(g @ Bson::String(s)) if s.starts_with('$') => g.clone(),
        Some(g @ Bson::Document(_)) => g.clone(),
        // MongoDB: Location40202 / 40198.
        _ => {
            return Err(QueryError::failed_to_parse(
                "The $bucket 'groupBy' field must be defined as a $-prefixed path or an expression",
            ));
        }
    };
    let boundaries = match spec.get("boundaries") {
        Some(Bson::Array(b)) if b.len() >= 2 => b.clone(),
        // MongoDB: Location40192.
        _ => {
            return Err(QueryError::bad_value(
                "The $bucket 'boundaries' field must be an array with at least two values",
            ));
        }
    };
    for pair in boundaries.windows(2) {
        if canonical_type(&pair[0]) != canonical_type(&pair[1]) {
            // MongoDB: Location40193.
            return Err(QueryError::bad_value(
                "All values in the 'boundaries' option to $bucket must have the same type",
            ));
        }
        if compare_values(&pair[0], &pair[1]) != std::cmp::Ordering::Less {
            // MongoDB: Location40194.
            return Err(QueryError::bad_value("The 'boundaries' option to $bucket must be sorted in ascending order"));
        }
    }
    if let Some(default) = spec.get("default") {
        let (first, last) = (&boundaries[0], &boundaries[boundaries.len() - 1]);
        let inside = canonical_type(default) == canonical_type(first)
            && compare_values(default, first) != std::cmp::Ordering::Less
            && compare_values(default, last) == std::cmp::Ordering::Less;
        if inside {
            // MongoDB: Location40199.
            return Err(QueryError::bad_value(
                "The $bucket 'default' field must be less than the lowest boundary or greater than or equal to \
                 the highest boundary",
            ));
        }
    }
    let branches: Vec<Bson> = boundaries
        .windows(2)
        .map(|pair| {
            Bson::Document(doc! {
                "case": { "$and": [
                    { "$gte": [group_by.clone(), { "$literal": pair[0].clone() }] },
                    { "$lt": [group_by.clone(), { "$literal": pair[1].clone() }] },
                ] },
                "then": { "$literal": pair[0].clone() },
            })
        })
        .collect();
    let mut switch = doc! { "branches": branches };
    if let Some(default) = spec.get("default") {
        switch.insert("default", doc! { "$literal": default.clone() });
    }
    let mut group = doc! { "_id": { "$switch": switch } };
    match spec.get("output") {
        None => {
            group.insert("count", doc! { "$sum": 1 });
        }
        Some(Bson::Document(output)) => group.extend(output.clone()),
        // MongoDB: Location40196.
        Some(_) => return Err(QueryError::failed_to_parse("The $bucket 'output' field must be an object")),
    }
    Ok((Bson::Document(group), doc! { "_id": 1 }))
}

pub(super) fn hold(input: DocStream<'_>, budget: super::Budget, stage: &str) -> Result<Vec<Document>> {
    let mut docs = Vec::new();
    let mut bytes = 0usize;
    for r in input {
        let d = r?;
        bytes = bytes.saturating_add(doc_size(&d));
        docs.push(d);
        check_budget(bytes, budget, stage)?;
    }
    Ok(docs)
}

fn check_budget(bytes: usize, budget: super::Budget, stage: &str) -> Result<()> {
    budget.check(bytes, stage)
}
