//! The shard's table of generic commands (the `Command` RPC): one [`Spec`] per command with its
//! canonical name, its aliases, its handler and the facts the service asks about it (how it is
//! admitted, whether a secondary may serve it, whether it counts as foreground load, which cached
//! metadata it invalidates). The typed RPCs (`find`, `insert`, ...) have their own methods.
//!
//! A request's name is looked up once, when the service receives it; the service and `explain`
//! ask the table and never match command names themselves.
//!
//! Must not: hold command logic (handlers live in `exec`), or be copied.

use std::collections::HashMap;
use std::sync::LazyLock;

use bson::Document;

use crate::error::ExecResult;
use crate::exec::{self, Node, Request};
use crate::ops;

/// Runs one command on the blocking pool: its reply and the sequence number its writes must be
/// durable up to (0 for reads).
pub type Run = fn(&Node, &Request<'_>) -> ExecResult<(Document, u64)>;

/// How a command runs.
#[derive(Clone, Copy)]
pub enum Handler {
    /// On the blocking pool, after admission.
    Blocking(Run),
    /// `replSetStepDown`: async on the replication state, before any admission.
    StepDown,
}

/// How a command is admitted (see the service's `admit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads documents: read concern first, a read pin when versioned.
    Read,
    /// Changes documents: the collection's write permit.
    Write,
    /// Creates or drops collections or indexes: the database's permit when versioned.
    Ddl,
    /// Neither: admitted as is.
    Other,
}

/// The cached sharding metadata a successful command makes stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forget {
    Nothing,
    /// The collection's (it may be re-created or re-sharded).
    Collection,
    /// The whole database's.
    Database,
}

#[derive(Clone, Copy)]
pub struct Spec {
    /// The canonical name (`findAndModify`).
    pub name: &'static str,
    /// Other spellings MongoDB accepts (`findandmodify`).
    pub aliases: &'static [&'static str],
    pub handler: Handler,
    pub access: Access,
    /// A secondary may serve it when the router allows (`secondary_ok`); else only a primary.
    pub reads: bool,
    /// Counted as foreground load for admission control (the balancer's questions are not).
    pub foreground: bool,
    pub forgets: Forget,
}

impl Spec {
    const fn new(name: &'static str, access: Access, handler: Handler) -> Spec {
        Spec { name, aliases: &[], handler, access, reads: false, foreground: true, forgets: Forget::Nothing }
    }
    const fn aliases(self, aliases: &'static [&'static str]) -> Spec {
        Spec { aliases, ..self }
    }
    const fn reads(self) -> Spec {
        Spec { reads: true, ..self }
    }
    const fn background(self) -> Spec {
        Spec { foreground: false, ..self }
    }
    const fn forgets(self, forgets: Forget) -> Spec {
        Spec { forgets, ..self }
    }
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spec").field("name", &self.name).field("access", &self.access).finish_non_exhaustive()
    }
}

/// A read's handler: its reply, nothing to wait for.
macro_rules! read {
    ($f:path) => {
        Handler::Blocking(|node, r| $f(node, r).map(|d| (d, 0)))
    };
}

use Access::{Ddl, Other, Read, Write};

/// Every command the shard's `Command` RPC serves.
pub static COMMANDS: &[Spec] = &[
    Spec::new("findAndModify", Write, Handler::Blocking(exec::find_and_modify::run)).aliases(&["findandmodify"]),
    Spec::new("count", Read, read!(exec::count::count)).reads(),
    Spec::new("distinct", Read, read!(exec::count::distinct)).reads(),
    Spec::new("create", Ddl, Handler::Blocking(exec::ddl::create)),
    Spec::new("drop", Ddl, Handler::Blocking(exec::ddl::drop)).forgets(Forget::Collection),
    Spec::new("dropDatabase", Other, Handler::Blocking(exec::ddl::drop_database)).forgets(Forget::Database),
    Spec::new("listCollections", Other, read!(exec::ddl::list_collections)).reads(),
    Spec::new("listDatabases", Other, read!(exec::ddl::list_databases)).reads(),
    Spec::new("listIndexes", Other, read!(exec::indexes::list_indexes)).reads(),
    Spec::new("collStats", Other, read!(exec::stats::coll_stats)).aliases(&["collstats"]).reads(),
    Spec::new("dbStats", Other, read!(exec::stats::db_stats)).aliases(&["dbstats"]).reads(),
    Spec::new("explain", Other, read!(exec::explain::explain)).reads(),
    Spec::new("createIndexes", Ddl, Handler::Blocking(exec::indexes::create_indexes)),
    Spec::new("dropIndexes", Ddl, Handler::Blocking(exec::indexes::drop_indexes)).aliases(&["deleteIndexes"]),
    Spec::new("collMod", Ddl, Handler::Blocking(exec::coll_mod::coll_mod)),
    Spec::new("shardingState", Other, Handler::Blocking(|node, _| Ok((node.sharding.status(), 0)))),
    Spec::new("replSetGetStatus", Other, Handler::Blocking(|node, _| Ok((node.repl.status(), 0)))),
    Spec::new("replSetStepDown", Other, Handler::StepDown),
    Spec::new("splitVector", Other, read!(exec::split_vector::split_vector)).background(),
    Spec::new("dataSize", Other, read!(exec::split_vector::data_size)).aliases(&["datasize"]).background(),
    Spec::new("_shoalChunkStats", Other, read!(exec::chunk_stats::chunk_stats)).background(),
    // The operator's commands on this member's operations: no data touched, any member.
    Spec::new("currentOp", Other, read!(ops::commands::current_op)),
    Spec::new("killOp", Other, read!(ops::commands::kill_op)),
    Spec::new("killSessions", Other, read!(ops::commands::kill_sessions)),
    Spec::new("killAllSessions", Other, read!(ops::commands::kill_all_sessions)),
    Spec::new("top", Other, read!(ops::commands::top)),
    Spec::new("profile", Other, read!(ops::commands::profile)),
];

/// Commands `explain` takes, by canonical name and alias. They run through the typed RPCs or
/// the table above; the explained command is planned, never run, so only its name matters here.
const EXPLAINABLE: &[(&str, &[&str])] = &[
    ("find", &[]),
    ("count", &[]),
    ("distinct", &[]),
    ("aggregate", &[]),
    ("update", &[]),
    ("delete", &[]),
    ("findAndModify", &["findandmodify"]),
];

static BY_NAME: LazyLock<HashMap<&'static str, &'static Spec>> = LazyLock::new(|| {
    let mut by_name = HashMap::new();
    for spec in COMMANDS {
        for name in std::iter::once(&spec.name).chain(spec.aliases) {
            by_name.insert(*name, spec);
        }
    }
    by_name
});

/// The entry for a command name as sent (canonical or an alias); `None` for unknown commands.
pub fn lookup(name: &str) -> Option<&'static Spec> {
    BY_NAME.get(name).copied()
}

/// The canonical name of an explainable command named `name` (canonical or an alias).
pub fn explainable(name: &str) -> Option<&'static str> {
    EXPLAINABLE.iter().find(|(canonical, aliases)| *canonical == name || aliases.contains(&name)).map(|(c, _)| *c)
}

/// Canonical names of the explainable commands, for error messages.
pub fn explainable_names() -> impl Iterator<Item = &'static str> {
    EXPLAINABLE.iter().map(|(c, _)| *c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_entry_has_its_facts() {
        // (name, access, reads, foreground, forgets)
        #[rustfmt::skip]
        let expected = [
            ("findAndModify",    Write, false, true,  Forget::Nothing),
            ("count",            Read,  true,  true,  Forget::Nothing),
            ("distinct",         Read,  true,  true,  Forget::Nothing),
            ("create",           Ddl,   false, true,  Forget::Nothing),
            ("drop",             Ddl,   false, true,  Forget::Collection),
            ("dropDatabase",     Other, false, true,  Forget::Database),
            ("listCollections",  Other, true,  true,  Forget::Nothing),
            ("listDatabases",    Other, true,  true,  Forget::Nothing),
            ("listIndexes",      Other, true,  true,  Forget::Nothing),
            ("collStats",        Other, true,  true,  Forget::Nothing),
            ("dbStats",          Other, true,  true,  Forget::Nothing),
            ("explain",          Other, true,  true,  Forget::Nothing),
            ("createIndexes",    Ddl,   false, true,  Forget::Nothing),
            ("dropIndexes",      Ddl,   false, true,  Forget::Nothing),
            ("collMod",          Ddl,   false, true,  Forget::Nothing),
            ("shardingState",    Other, false, true,  Forget::Nothing),
            ("replSetGetStatus", Other, false, true,  Forget::Nothing),
            ("replSetStepDown",  Other, false, true,  Forget::Nothing),
            ("splitVector",      Other, false, false, Forget::Nothing),
            ("dataSize",         Other, false, false, Forget::Nothing),
            ("_shoalChunkStats", Other, false, false, Forget::Nothing),
            ("currentOp",        Other, false, true,  Forget::Nothing),
            ("killOp",           Other, false, true,  Forget::Nothing),
            ("killSessions",     Other, false, true,  Forget::Nothing),
            ("killAllSessions",  Other, false, true,  Forget::Nothing),
            ("top",              Other, false, true,  Forget::Nothing),
            ("profile",          Other, false, true,  Forget::Nothing),
        ];
        assert_eq!(COMMANDS.len(), expected.len(), "a command was added or removed: update this test");
        for (name, access, reads, foreground, forgets) in expected {
            let spec = lookup(name).unwrap_or_else(|| panic!("{name} is not in the table"));
            assert_eq!(spec.name, name);
            assert_eq!(
                (spec.access, spec.reads, spec.foreground, spec.forgets),
                (access, reads, foreground, forgets),
                "{name}"
            );
        }
    }

    #[test]
    fn aliases_lead_to_their_canonical_entry() {
        for (alias, canonical) in [
            ("findandmodify", "findAndModify"),
            ("collstats", "collStats"),
            ("dbstats", "dbStats"),
            ("deleteIndexes", "dropIndexes"),
            ("datasize", "dataSize"),
        ] {
            let spec = lookup(alias).unwrap_or_else(|| panic!("{alias}"));
            assert!(std::ptr::eq(spec, lookup(canonical).expect("canonical")), "{alias}");
        }
        assert_eq!(explainable("findandmodify"), Some("findAndModify"));
        assert_eq!(explainable("insert"), None, "inserts have no plan to explain");
        let mut seen = std::collections::HashSet::new();
        for spec in COMMANDS {
            for name in std::iter::once(&spec.name).chain(spec.aliases) {
                assert!(seen.insert(*name), "{name} appears twice");
            }
        }
    }
}
