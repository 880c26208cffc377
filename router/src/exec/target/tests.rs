use bson::{Bson, doc};
use proptest::prelude::*;
use shoal_proto::catalog::{ChunkVersion, Timestamp};
use shoal_query::filter::Filter;
use shoal_query::shard_key::{KeyField, Missing};

use super::*;

fn chunks(pattern: &KeyPattern, splits: &[Document], owners: &[u8]) -> Vec<Chunk> {
    let fields = KeyField::of(pattern);
    let mut keys: Vec<Vec<u8>> =
        splits.iter().map(|d| shard_key::of_document(&fields, d, Missing::Refuse).unwrap()).collect();
    keys.sort();
    keys.dedup();
    let mut bounds = vec![ChunkBound::Min];
    bounds.extend(keys.into_iter().map(ChunkBound::Key));
    bounds.push(ChunkBound::Max);
    bounds
        .windows(2)
        .enumerate()
        .map(|(i, w)| Chunk {
            min: w[0].clone(),
            max: w[1].clone(),
            shard: format!("s{}", owners.get(i).copied().unwrap_or(0) % 3),
            version: ChunkVersion::new(1, i as u32),
            history: Vec::new(),
            jumbo: false,
            on_current_shard_since: Timestamp::default(),
        })
        .collect()
}

/// Every shard holding a document the filter matches, by evaluating the filter on each document.
fn brute_force(pattern: &KeyPattern, chunks: &[Chunk], filter: &Document, docs: &[Document]) -> BTreeSet<String> {
    let f = Filter::parse(filter).unwrap();
    let fields = KeyField::of(pattern);
    docs.iter()
        .filter(|d| f.matches(d))
        .map(|d| chunk_of(chunks, &shard_key::of_document(&fields, d, Missing::Refuse).unwrap()).unwrap().shard.clone())
        .collect()
}

fn filter_strategy() -> impl Strategy<Value = Document> {
    let v = -30i32..30;
    prop_oneof![
        v.clone().prop_map(|x| doc! { "a": x }),
        v.clone().prop_map(|x| doc! { "a": { "$eq": x } }),
        prop::collection::vec(v.clone(), 1..5).prop_map(|xs| doc! { "a": { "$in": xs } }),
        v.clone().prop_map(|x| doc! { "a": { "$gt": x } }),
        v.clone().prop_map(|x| doc! { "a": { "$gte": x } }),
        v.clone().prop_map(|x| doc! { "a": { "$lt": x } }),
        v.clone().prop_map(|x| doc! { "a": { "$lte": x } }),
        (v.clone(), v.clone()).prop_map(|(x, y)| doc! { "a": { "$gte": x, "$lt": y } }),
        (v.clone(), v.clone()).prop_map(|(x, y)| doc! { "$and": [{ "a": { "$gt": x } }, { "b": y }] }),
        (v.clone(), v.clone()).prop_map(|(x, y)| doc! { "a": x, "b": y }),
        (v.clone(), v.clone()).prop_map(|(x, y)| doc! { "a": x, "b": { "$in": [y, y + 1] } }),
        v.clone().prop_map(|x| doc! { "b": x }),
        v.prop_map(|x| doc! { "$or": [{ "a": x }, { "b": x }] }),
    ]
}

fn docs() -> Vec<Document> {
    (-35..35).flat_map(|a| (-3..3).map(move |b| doc! { "a": a, "b": b * 10 })).collect()
}

proptest! {
    #[test]
    fn range_key_targets_contain_every_matching_shard(
        splits in prop::collection::vec(-30i32..30, 0..8),
        owners in prop::collection::vec(0u8..3, 10),
        filter in filter_strategy(),
    ) {
        let pattern = KeyPattern::range(&["a"]);
        let chunks = chunks(&pattern, &splits.iter().map(|x| doc! { "a": x }).collect::<Vec<_>>(), &owners);
        let docs = docs();
        let want = brute_force(&pattern, &chunks, &filter, &docs);
        let got = shards_for(&chunks, &key_space(&pattern, &filter));
        prop_assert!(want.is_subset(&got), "{filter}: want {want:?} got {got:?}");
        if let Some(Bson::Int32(x)) = filter.get("a") {
            let one = brute_force(&pattern, &chunks, &doc! { "a": x }, &[doc! { "a": x, "b": 0 }]);
            prop_assert_eq!(got, one);
        }
    }

    #[test]
    fn compound_key_targets_contain_every_matching_shard(
        splits in prop::collection::vec((-30i32..30, -30i32..30), 0..8),
        owners in prop::collection::vec(0u8..3, 10),
        filter in filter_strategy(),
    ) {
        let pattern = KeyPattern::range(&["a", "b"]);
        let split_docs: Vec<Document> = splits.iter().map(|(a, b)| doc! { "a": a, "b": b }).collect();
        let chunks = chunks(&pattern, &split_docs, &owners);
        let want = brute_force(&pattern, &chunks, &filter, &docs());
        let got = shards_for(&chunks, &key_space(&pattern, &filter));
        prop_assert!(want.is_subset(&got), "{filter}: want {want:?} got {got:?}");
    }

    #[test]
    fn hashed_key_targets_contain_every_matching_shard(
        splits in prop::collection::vec(any::<i64>(), 0..8),
        owners in prop::collection::vec(0u8..3, 10),
        filter in filter_strategy(),
    ) {
        let pattern = KeyPattern::hashed("a");
        let mut keys: Vec<Vec<u8>> = splits.iter().map(|h| shard_key::of_values(&[&Bson::Int64(*h)])).collect();
        keys.sort();
        keys.dedup();
        let mut bounds = vec![ChunkBound::Min];
        bounds.extend(keys.into_iter().map(ChunkBound::Key));
        bounds.push(ChunkBound::Max);
        let chunks: Vec<Chunk> = bounds.windows(2).enumerate().map(|(i, w)| Chunk {
            min: w[0].clone(), max: w[1].clone(), shard: format!("s{}", owners[i] % 3),
            version: ChunkVersion::new(1, i as u32), history: Vec::new(), jumbo: false,
            on_current_shard_since: Timestamp::default(),
        }).collect();
        let want = brute_force(&pattern, &chunks, &filter, &docs());
        let got = shards_for(&chunks, &key_space(&pattern, &filter));
        prop_assert!(want.is_subset(&got), "{filter}: want {want:?} got {got:?}");
        if filter.get("a").is_some_and(|v| matches!(v, Bson::Int32(_))) {
            prop_assert_eq!(got.len(), 1);
        }
    }
}

#[test]
fn equality_on_the_whole_key_is_one_point_and_others_scatter() {
    let p = KeyPattern::range(&["a", "b"]);
    assert!(matches!(key_space(&p, &doc! { "a": 1, "b": 2 }), KeySpace::Points(k) if k.len() == 1));
    assert!(matches!(key_space(&p, &doc! { "a": 1, "b": { "$in": [1, 2] } }), KeySpace::Points(k) if k.len() == 2));
    assert!(matches!(key_space(&p, &doc! { "a": 1 }), KeySpace::Range(..)));
    assert_eq!(key_space(&p, &doc! { "b": 1 }), KeySpace::All);
    assert_eq!(key_space(&KeyPattern::hashed("a"), &doc! { "a": { "$gt": 1 } }), KeySpace::All);
}
