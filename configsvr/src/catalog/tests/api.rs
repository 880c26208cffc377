//! The narrow queries of the client API (`api::answer`): each answer decodes to what the catalog
//! holds, and malformed queries are refused.

use shoal_proto::catalog::wire;
use shoal_proto::config::catalog_query::What;
use shoal_proto::config::{self as pb, CatalogQuery};

use super::*;
use crate::catalog::api::{QUERIES_PER_REQUEST_MAX, QueryError, answer, answer_all};

fn ask<T: serde::de::DeserializeOwned>(cat: &ClusterCatalog, what: What) -> T {
    let bytes = answer(cat, &CatalogQuery { what: Some(what) }).expect("answered");
    wire::decode(&bytes).expect("decodes")
}

/// Two shards, `db.c` sharded and split in two, and a database whose name extends `db`'s.
fn busy() -> Fx {
    let mut fx = Fx::with_collection(2);
    let split = fx.split(&ChunkBound::Min, &[b"m"]);
    fx.ok(split);
    fx.ok(Command::CreateDatabase { name: "dbx".into(), primary: "s1".into(), uuid: uuid(3) });
    fx.ok(shard_cmd("dbx.c", InitialChunks::Single));
    fx
}

#[test]
fn every_query_answers_what_the_catalog_holds() {
    let fx = busy();
    let cat = &fx.cat;
    let all = || What::Shards(pb::All {});
    assert_eq!(ask::<Vec<Shard>>(cat, all()), cat.shards().values().cloned().collect::<Vec<_>>());
    assert_eq!(ask::<Option<Shard>>(cat, What::Shard("s1".into())), cat.shard("s1").cloned());
    assert_eq!(ask::<Option<Shard>>(cat, What::Shard("nope".into())), None);
    assert_eq!(
        ask::<Vec<Database>>(cat, What::Databases(pb::All {})),
        cat.databases().values().cloned().collect::<Vec<_>>()
    );
    assert_eq!(ask::<Option<Database>>(cat, What::Database("dbx".into())), cat.database("dbx").cloned());
    assert_eq!(ask::<Option<Collection>>(cat, What::Collection(NS.into())), cat.collection(NS).cloned());
    assert_eq!(ask::<Option<Collection>>(cat, What::Collection("db.none".into())), None);
    assert_eq!(ask::<Settings>(cat, What::Settings(pb::All {})), *cat.settings());
    assert_eq!(ask::<Vec<ZoneRange>>(cat, What::ZoneRanges(NS.into())), cat.zone_ranges(NS).to_vec());
}

#[test]
fn collections_in_a_database_stop_at_its_name() {
    let fx = busy();
    let in_db: Vec<Collection> = ask(&fx.cat, What::CollectionsIn("db".into()));
    assert_eq!(in_db.iter().map(|c| c.ns.as_str()).collect::<Vec<_>>(), [NS]);
    let in_dbx: Vec<Collection> = ask(&fx.cat, What::CollectionsIn("dbx".into()));
    assert_eq!(in_dbx.iter().map(|c| c.ns.as_str()).collect::<Vec<_>>(), ["dbx.c"]);
    assert!(ask::<Vec<Collection>>(&fx.cat, What::CollectionsIn("d".into())).is_empty());
}

#[test]
fn routing_table_whole_and_since_a_version() {
    let fx = busy();
    let whole: RoutingAnswer = ask(&fx.cat, What::RoutingTable(pb::RoutingTableQuery { ns: NS.into(), since: None }));
    assert_eq!(whole, RoutingAnswer::Full(fx.cat.routing_table(NS)));
    let coll = fx.coll();
    let since = |epoch: Epoch| pb::RoutingSince {
        epoch: epoch.0.to_vec().into(),
        major: coll.version.major,
        minor: coll.version.minor,
    };
    let current: RoutingAnswer =
        ask(&fx.cat, What::RoutingTable(pb::RoutingTableQuery { ns: NS.into(), since: Some(since(coll.epoch)) }));
    assert_eq!(current, RoutingAnswer::Changes(fx.cat.chunks_since(NS, coll.epoch, coll.version)));
    let RoutingAnswer::Changes(ChangedChunks::Changed { chunks, .. }) = current else { panic!("{current:?}") };
    assert!(chunks.is_empty(), "nothing changed since the current version");
    let other: RoutingAnswer =
        ask(&fx.cat, What::RoutingTable(pb::RoutingTableQuery { ns: NS.into(), since: Some(since(epoch(9))) }));
    assert!(matches!(other, RoutingAnswer::Changes(ChangedChunks::EpochChanged { .. })), "{other:?}");
}

#[test]
fn malformed_queries_are_refused() {
    let fx = busy();
    assert!(matches!(answer(&fx.cat, &CatalogQuery { what: None }), Err(QueryError::Empty)));
    let short = pb::RoutingSince { epoch: vec![1, 2, 3].into(), major: 1, minor: 0 };
    let q =
        CatalogQuery { what: Some(What::RoutingTable(pb::RoutingTableQuery { ns: NS.into(), since: Some(short) })) };
    assert!(matches!(answer(&fx.cat, &q), Err(QueryError::BadEpoch { len: 3, .. })));
    let one = CatalogQuery { what: Some(What::Settings(pb::All {})) };
    assert_eq!(answer_all(&fx.cat, &vec![one.clone(); QUERIES_PER_REQUEST_MAX]).expect("at the limit").len(), 64);
    let too_many = vec![one; QUERIES_PER_REQUEST_MAX + 1];
    assert!(matches!(answer_all(&fx.cat, &too_many), Err(QueryError::TooMany { got: 65 })));
}
