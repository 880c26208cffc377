//! Merging results from several shards: sorted k-way merge with skip/limit applied after it,
//! value union for `distinct`. Pure functions over decoded documents.
//!
//! Must not: talk to shards or know about cursors.

use std::cmp::Ordering;

use bson::{Bson, Document};
use shoal_query::collation::Collation;
use shoal_query::sort::SortSpec;

/// Merges per-shard streams, each already sorted by `sort` (or in any order when `sort` is
/// empty: then they are concatenated), drops the first `skip`, keeps at most `limit`
/// (`None`: all). Ties keep the earlier shard's document first.
pub fn merge_sorted(streams: Vec<Vec<Document>>, sort: &SortSpec, skip: usize, limit: Option<usize>) -> Vec<Document> {
    let take = limit.unwrap_or(usize::MAX);
    if sort.is_empty() {
        return streams.into_iter().flatten().skip(skip).take(take).collect();
    }
    let mut iters: Vec<std::iter::Peekable<std::vec::IntoIter<Document>>> =
        streams.into_iter().map(|s| s.into_iter().peekable()).collect();
    let mut out = Vec::new();
    let mut skipped = 0;
    while out.len() < take {
        let mut best: Option<(usize, &Document)> = None;
        for (i, it) in iters.iter_mut().enumerate() {
            let Some(candidate) = it.peek() else { continue };
            best = match best {
                Some((b, current)) if sort.compare(candidate, current) != Ordering::Less => Some((b, current)),
                _ => Some((i, candidate)),
            };
        }
        let best = best.map(|(i, _)| i);
        let Some(b) = best else { break };
        let Some(doc) = iters[b].next() else { break };
        if skipped < skip {
            skipped += 1;
        } else {
            out.push(doc);
        }
    }
    out
}

/// The union of `distinct` answers: deduplicated by BSON equality, sorted as MongoDB returns.
pub fn union_values(answers: Vec<Vec<Bson>>) -> Vec<Bson> {
    union_values_collated(answers, Collation::Simple)
}

/// [`union_values`] where values equal under `collation` ("a" and "A" case-insensitively) are
/// one value (the first shard's), as each shard's own `distinct` already does.
pub fn union_values_collated(answers: Vec<Vec<Bson>>, collation: Collation) -> Vec<Bson> {
    let mut all: Vec<Bson> = answers.into_iter().flatten().collect();
    all.sort_by(|a, b| collation.compare(a, b));
    all.dedup_by(|a, b| collation.compare(a, b) == Ordering::Equal);
    all
}

#[cfg(test)]
mod tests {
    use bson::doc;
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn sorted_merge_with_skip_and_limit_is_sort_of_union(
            streams in prop::collection::vec(prop::collection::vec((0i32..20, 0i32..1000), 0..15), 1..4),
            skip in 0usize..20,
            limit in prop::option::of(0usize..20),
            descending in any::<bool>(),
        ) {
            let spec = SortSpec::parse(&doc! { "k": if descending { -1 } else { 1 } }).unwrap();
            let mut per_shard: Vec<Vec<Document>> = Vec::new();
            for (s, rows) in streams.iter().enumerate() {
                let mut docs: Vec<Document> =
                    rows.iter().map(|(k, id)| doc! { "k": k, "_id": format!("{s}-{id}") }).collect();
                shoal_query::sort::sort_documents(&mut docs, &spec);
                per_shard.push(docs);
            }
            let mut all: Vec<Document> = per_shard.iter().flatten().cloned().collect();
            shoal_query::sort::sort_documents(&mut all, &spec);
            let want: Vec<i32> =
                all.iter().skip(skip).take(limit.unwrap_or(usize::MAX)).map(|d| d.get_i32("k").unwrap()).collect();
            let got: Vec<i32> =
                merge_sorted(per_shard, &spec, skip, limit).iter().map(|d| d.get_i32("k").unwrap()).collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn distinct_union_dedups_and_sorts() {
        let got =
            union_values(vec![vec![Bson::Int32(3), Bson::String("a".into())], vec![Bson::Int32(1), Bson::Int32(3)]]);
        assert_eq!(got, vec![Bson::Int32(1), Bson::Int32(3), Bson::String("a".into())]);
    }
}
