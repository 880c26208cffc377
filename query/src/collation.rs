//! `collation`: how strings compare. Shoal implements the simple (binary) collation and English
//! (`locale: "en"` / `"en_US"`) at strength 1 (base letters: case and diacritics ignored) and
//! strength 2 (case ignored, diacritics count), with ICU's defaults for everything else. Any other
//! locale MongoDB knows, strength 3 and above (the ICU default when `strength` is absent), and the
//! options that change order (`caseLevel`, `caseFirst` other than "off", `numericOrdering`,
//! `alternate: "shifted"`, `backwards`) are refused with NotImplemented (238); a locale MongoDB
//! does not know is BadValue (2), as MongoDB answers. Never a silent wrong answer.
//!
//! How: a non-simple collation maps each string to a *comparison key* whose code point order is
//! the collation's order ([`Collation::key`]), and [`Collation::collate`] maps a whole value (strings
//! inside documents and arrays too; field names stay binary, as in MongoDB). Every comparison
//! in the crate then runs unchanged on collated values, so `$eq $in $gt…`, sort, distinct and
//! `$group` agree with each other.
//!
//! The key follows ICU's root order (which English uses unchanged): controls are ignorable;
//! then whitespace < ASCII punctuation and symbols (ICU's order, `_ - , ; : ! ? . ' " ( ) [ ] { }
//! @ * / \ & # % ` ^ + < = > | ~ $`) < other symbols < digits < letters; letters are compared
//! case-folded after canonical decomposition, their diacritics (combining marks) only at
//! strength 2, after all base letters (so `cote < coté < côte < côté`, ICU's non-French order).
//! `ß`, `æ`, `œ` expand to `ss`, `ae`, `oe`. Known approximation (documented in
//! docs/query-language.md): letters of non-Latin scripts, non-ASCII symbols and non-ASCII
//! digits order by code point inside their class, where ICU has its own tables.
//!
//! Invariant: [`Collation::Simple`] never allocates or changes a value.

use std::borrow::Cow;
use std::cmp::Ordering;

use bson::{Bson, Document};
use shoal_proto::ErrorCode;
use unicode_normalization::UnicodeNormalization;

use crate::error::{QueryError, Result};

/// A parsed `collation`. Cheap to copy into every filter, sort and group of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Collation {
    /// Binary comparison of UTF-8 bytes (no `collation`, `{}`, or `{locale: "simple"}`).
    #[default]
    Simple,
    /// English at ICU strength 1 (`base_only`) or 2.
    English { base_only: bool },
}

/// Locales MongoDB accepts (its ICU list); those other than English are refused as not
/// implemented rather than as unknown.
const KNOWN_LOCALES: &[&str] = &[
    "af",
    "sq",
    "am",
    "ar",
    "hy",
    "as",
    "az",
    "be",
    "bn",
    "bs",
    "bg",
    "my",
    "ca",
    "chr",
    "zh",
    "zh_Hant",
    "hr",
    "cs",
    "da",
    "nl",
    "dz",
    "en",
    "en_US",
    "en_US_POSIX",
    "eo",
    "et",
    "ee",
    "fo",
    "fil",
    "fi_FI",
    "fr",
    "fr_CA",
    "gl",
    "ka",
    "de",
    "de_AT",
    "el",
    "gu",
    "ha",
    "haw",
    "he",
    "hi",
    "hu",
    "is",
    "ig",
    "smn",
    "id",
    "ga",
    "it",
    "ja",
    "kl",
    "kn",
    "kk",
    "km",
    "kok",
    "ko",
    "ky",
    "lk",
    "lo",
    "lv",
    "li",
    "lt",
    "dsb",
    "lb",
    "mk",
    "ms",
    "ml",
    "mt",
    "mr",
    "mn",
    "ne",
    "se",
    "nb",
    "nn",
    "or",
    "om",
    "ps",
    "fa",
    "fa_AF",
    "pl",
    "pt",
    "pa",
    "ro",
    "ru",
    "sr",
    "sr_Latn",
    "si",
    "sk",
    "sl",
    "es",
    "sw",
    "sv",
    "ta",
    "te",
    "th",
    "bo",
    "to",
    "tr",
    "uk",
    "hsb",
    "ur",
    "ug",
    "vi",
    "wae",
    "cy",
    "yi",
    "yo",
    "zu",
];

/// ICU's root order of ASCII punctuation and symbols.
const ASCII_PUNCTUATION: &str = "_-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$";

const FIELDS: &[&str] = &[
    "locale",
    "caseLevel",
    "caseFirst",
    "strength",
    "numericOrdering",
    "alternate",
    "maxVariable",
    "normalization",
    "backwards",
    "version",
];

fn not_implemented(what: impl std::fmt::Display) -> QueryError {
    QueryError::new(
        ErrorCode::NotImplemented,
        format!(
            "collation {what} is not supported by Shoal (supported: {{locale: \"simple\"}} and {{locale: \"en\", \
             strength: 1 or 2}})"
        ),
    )
}

impl Collation {
    /// The `collation` field of a command (or of one write statement): absent, null or `{}` is
    /// the simple collation.
    pub fn from_command(body: &Document, cmd: &str) -> Result<Collation> {
        match body.get("collation") {
            None | Some(Bson::Null) => Ok(Collation::Simple),
            Some(Bson::Document(spec)) => Collation::parse(spec),
            Some(other) => Err(QueryError::type_mismatch(format!(
                "BSON field '{cmd}.collation' is the wrong type '{}', expected type 'object'",
                crate::display::type_name(other)
            ))),
        }
    }

    pub fn parse(spec: &Document) -> Result<Collation> {
        if spec.is_empty() {
            return Ok(Collation::Simple);
        }
        if let Some(k) = spec.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(QueryError::new(
                ErrorCode::Location40415,
                format!("BSON field 'collation.{k}' is an unknown field."),
            ));
        }
        let locale = match spec.get("locale") {
            Some(Bson::String(l)) => l.as_str(),
            Some(other) => {
                return Err(QueryError::type_mismatch(format!(
                    "BSON field 'collation.locale' is the wrong type '{}', expected type 'string'",
                    crate::display::type_name(other)
                )));
            }
            None => {
                return Err(QueryError::new(
                    ErrorCode::Location40414,
                    "BSON field 'collation.locale' is missing but a required field",
                ));
            }
        };
        let str_field = |name: &str, allowed: &[&str]| -> Result<Option<&str>> {
            match spec.get(name) {
                None => Ok(None),
                Some(Bson::String(s)) if allowed.contains(&s.as_str()) => Ok(Some(s.as_str())),
                Some(Bson::String(s)) => Err(QueryError::bad_value(format!("unknown collation {name}: {s}"))),
                Some(other) => Err(QueryError::type_mismatch(format!(
                    "BSON field 'collation.{name}' is the wrong type '{}', expected type 'string'",
                    crate::display::type_name(other)
                ))),
            }
        };
        let bool_field = |name: &str| -> Result<bool> {
            match spec.get(name) {
                None => Ok(false),
                Some(Bson::Boolean(b)) => Ok(*b),
                Some(other) => Err(QueryError::type_mismatch(format!(
                    "BSON field 'collation.{name}' is the wrong type '{}', expected type 'bool'",
                    crate::display::type_name(other)
                ))),
            }
        };
        let strength = match spec.get("strength") {
            None => None,
            Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => {
                let n = match v {
                    Bson::Int32(i) => f64::from(*i),
                    Bson::Int64(i) => *i as f64,
                    Bson::Double(f) => *f,
                    _ => unreachable!("matched numbers"),
                };
                if !(1.0..=5.0).contains(&n) || n.fract() != 0.0 {
                    return Err(QueryError::bad_value(format!("collation strength must be 1 to 5, got {v}")));
                }
                Some(n as u8)
            }
            Some(other) => {
                return Err(QueryError::type_mismatch(format!(
                    "BSON field 'collation.strength' is the wrong type '{}', expected type 'int'",
                    crate::display::type_name(other)
                )));
            }
        };
        let case_first = str_field("caseFirst", &["upper", "lower", "off"])?;
        let alternate = str_field("alternate", &["non-ignorable", "shifted"])?;
        str_field("maxVariable", &["punct", "space"])?;
        let case_level = bool_field("caseLevel")?;
        let numeric = bool_field("numericOrdering")?;
        let backwards = bool_field("backwards")?;
        bool_field("normalization")?;
        if locale == "simple" {
            if spec.len() > 1 {
                return Err(QueryError::bad_value("If 'locale' is \"simple\", no other collation fields may be set"));
            }
            return Ok(Collation::Simple);
        }
        if !KNOWN_LOCALES.contains(&locale) {
            // MongoDB: BadValue, "Field 'locale' is invalid in: {...}".
            return Err(QueryError::bad_value(format!(
                "Field 'locale' is invalid in: {}",
                crate::display::document(spec)
            )));
        }
        if locale != "en" && locale != "en_US" {
            return Err(not_implemented(format!("locale \"{locale}\"")));
        }
        let base_only = match strength {
            Some(1) => true,
            Some(2) => false,
            None => return Err(not_implemented("strength 3 (the default when 'strength' is absent)")),
            Some(n) => return Err(not_implemented(format!("strength {n}"))),
        };
        if case_level {
            return Err(not_implemented("caseLevel: true"));
        }
        if let Some(c) = case_first.filter(|c| *c != "off") {
            return Err(not_implemented(format!("caseFirst: \"{c}\"")));
        }
        if numeric {
            return Err(not_implemented("numericOrdering: true"));
        }
        if alternate == Some("shifted") {
            return Err(not_implemented("alternate: \"shifted\""));
        }
        if backwards {
            return Err(not_implemented("backwards: true"));
        }
        Ok(Collation::English { base_only })
    }

    /// Whether strings compare bytewise. A planner may only use index bounds on strings (which
    /// are built binary) when this holds.
    pub fn is_simple(&self) -> bool {
        matches!(self, Collation::Simple)
    }

    /// The comparison key of `s`: two strings compare under the collation as their keys compare
    /// by code point (and so bytewise, UTF-8 preserving code point order).
    pub fn key(&self, s: &str) -> String {
        let Collation::English { base_only } = *self else { return s.to_owned() };
        let mut primary = String::with_capacity(s.len() * 2);
        // One entry per base character: its diacritics.
        let mut marks: Vec<Vec<char>> = Vec::new();
        for c in s.nfd() {
            if is_combining_mark(c) {
                if let Some(last) = marks.last_mut() {
                    last.push(c);
                }
                continue;
            }
            for folded in c.to_lowercase() {
                let expansion: &[char] = match folded {
                    'ß' => &['s', 's'],
                    'æ' => &['a', 'e'],
                    'œ' => &['o', 'e'],
                    _ => std::slice::from_ref(&folded),
                };
                for &base in expansion {
                    if is_combining_mark(base) {
                        if let Some(last) = marks.last_mut() {
                            last.push(base);
                        }
                        continue;
                    }
                    if let Some((class, weight)) = primary_weight(base) {
                        primary.push(class);
                        primary.push(weight);
                        marks.push(Vec::new());
                    }
                }
            }
        }
        if !base_only {
            // U+0001 sorts below every class character, so a key that is a prefix of another
            // in primary sorts first, as in ICU.
            primary.push('\u{1}');
            for m in marks {
                primary.push('\u{2}');
                primary.extend(m);
            }
        }
        primary
    }

    /// `v` with every string (inside documents and arrays too) replaced by its key.
    pub fn collate<'a>(&self, v: &'a Bson) -> Cow<'a, Bson> {
        if self.is_simple() || !has_string(v) {
            return Cow::Borrowed(v);
        }
        Cow::Owned(self.collate_owned(v))
    }

    fn collate_owned(&self, v: &Bson) -> Bson {
        match v {
            Bson::String(s) | Bson::Symbol(s) => Bson::String(self.key(s)),
            Bson::Document(d) => Bson::Document(self.collate_document(d)),
            Bson::Array(a) => Bson::Array(a.iter().map(|e| self.collate_owned(e)).collect()),
            other => other.clone(),
        }
    }

    /// A document with its string values replaced by keys (field names unchanged).
    pub fn collate_document(&self, d: &Document) -> Document {
        d.iter().map(|(k, v)| (k.clone(), self.collate_owned(v))).collect()
    }

    /// MongoDB's order of values under this collation.
    pub fn compare(&self, a: &Bson, b: &Bson) -> Ordering {
        match self {
            Collation::Simple => crate::order::compare_values(a, b),
            _ => crate::order::compare_values(&self.collate(a), &self.collate(b)),
        }
    }
}

/// Whether a string occurs in `v` (only such values change under a collation).
pub(crate) fn has_string(v: &Bson) -> bool {
    match v {
        Bson::String(_) | Bson::Symbol(_) => true,
        Bson::Document(d) => d.values().any(has_string),
        Bson::Array(a) => a.iter().any(has_string),
        _ => false,
    }
}

fn is_combining_mark(c: char) -> bool {
    matches!(c, '\u{300}'..='\u{36F}' | '\u{1AB0}'..='\u{1AFF}' | '\u{1DC0}'..='\u{1DFF}' | '\u{20D0}'..='\u{20FF}' | '\u{FE20}'..='\u{FE2F}')
}

/// The primary weight of a case-folded base character as a (class, weight) pair of key
/// characters; `None` for characters ICU ignores (controls, format characters).
fn primary_weight(c: char) -> Option<(char, char)> {
    const WHITESPACE: char = '\u{3}';
    const PUNCTUATION: char = '\u{4}';
    const SYMBOL: char = '\u{5}';
    const DIGIT: char = '\u{6}';
    const LETTER: char = '\u{7}';
    if let Some(i) = ASCII_PUNCTUATION.find(c) {
        return Some((PUNCTUATION, char::from(0x20 + i as u8)));
    }
    Some(match c {
        '\t' | '\n' | '\u{b}' | '\u{c}' | '\r' | ' ' => (WHITESPACE, c),
        c if c.is_control() || matches!(c, '\u{200B}'..='\u{200F}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}') => {
            return None;
        }
        c if c.is_whitespace() => (WHITESPACE, c),
        '0'..='9' => (DIGIT, c),
        c if c.is_alphanumeric() => (LETTER, c),
        c => (SYMBOL, c),
    })
}

#[cfg(test)]
mod tests;
