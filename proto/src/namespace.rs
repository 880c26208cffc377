//! `db.collection` namespaces with MongoDB's naming rules.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace {
    pub db: String,
    pub coll: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NamespaceError {
    #[error("Invalid database name: '{0}'")]
    InvalidDb(String),
    #[error("Invalid collection name: '{0}'")]
    InvalidCollection(String),
    #[error("Fully qualified namespace is too long. Namespace: {0} Max: 255")]
    TooLong(String),
}

/// MongoDB's database-name limit: fewer than 64 bytes.
const DB_NAME_MAX_BYTES: usize = 63;
/// MongoDB's namespace limit (bytes), `db.coll`.
const NAMESPACE_MAX_BYTES: usize = 255;

impl Namespace {
    pub fn new(db: &str, coll: &str) -> Result<Self, NamespaceError> {
        validate_db(db)?;
        if coll.is_empty() || coll.contains('\0') || coll.starts_with('.') || coll.contains('$') {
            return Err(NamespaceError::InvalidCollection(coll.to_owned()));
        }
        if db.len() + 1 + coll.len() > NAMESPACE_MAX_BYTES {
            return Err(NamespaceError::TooLong(format!("{db}.{coll}")));
        }
        Ok(Self { db: db.to_owned(), coll: coll.to_owned() })
    }

    /// Parses `db.coll` (the collection part may itself contain dots).
    pub fn parse(full: &str) -> Result<Self, NamespaceError> {
        match full.split_once('.') {
            Some((db, coll)) => Self::new(db, coll),
            None => Err(NamespaceError::InvalidCollection(full.to_owned())),
        }
    }
}

pub fn validate_db(db: &str) -> Result<(), NamespaceError> {
    let bad = db.is_empty()
        || db.len() > DB_NAME_MAX_BYTES
        || db.chars().any(|c| matches!(c, '/' | '\\' | '.' | ' ' | '"' | '$' | '\0'));
    if bad { Err(NamespaceError::InvalidDb(db.to_owned())) } else { Ok(()) }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.db, self.coll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates() {
        let ns = Namespace::parse("test.a.b").expect("valid");
        assert_eq!((ns.db.as_str(), ns.coll.as_str()), ("test", "a.b"));
        assert!(Namespace::parse("nodot").is_err());
        assert!(Namespace::new("bad db", "c").is_err());
        assert!(Namespace::new("db", "").is_err());
        assert!(Namespace::new("db", "a$b").is_err());
        assert!(Namespace::new(&"x".repeat(64), "c").is_err());
        assert!(Namespace::new(&"x".repeat(63), "c").is_ok());
        for bad in [".", "a.b", "a/b", "a b", "a\"b", "a\0b", "a$b", "a\\b", ""] {
            assert!(validate_db(bad).is_err(), "{bad:?}");
        }
    }
}
