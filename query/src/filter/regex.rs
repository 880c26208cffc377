//! `$regex`: MongoDB's PCRE patterns run on the `regex` crate.
//!
//! Owns the translation of a pattern and its options (`i m s x`) into a compiled [`Pattern`].
//! The `regex` crate matches in linear time, so no filter can hang a shard on catastrophic
//! backtracking; the price is that backreferences, lookaround, atomic groups, possessive
//! quantifiers, `\G` and recursion are refused at parse time with `BadValue` ("Regular
//! expression is invalid: ...") instead of silently matching differently.
//!
//! PCRE spellings the crate lacks are rewritten: `\Q...\E` quoting, `\Z`, and `$` (which in PCRE
//! also matches before a final newline). Inside a character class, `[`, `&`, `~` and `-` runs
//! that the crate would read as nested classes or set operations are escaped, since PCRE
//! reads them as literals.
//!
//! Invariant: a [`Pattern`] keeps the source pattern and options, because a stored BSON regex
//! matches `$regex` by being the same pattern with the same options, not by running it.

use bson::Bson;

use crate::error::QueryError;

#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    pub(crate) source: String,
    pub(crate) options: String,
    compiled: regex::Regex,
}

/// Longest compiled program we accept, in bytes; bounds the memory one filter can take.
const REGEX_SIZE_LIMIT_BYTES: usize = 4 << 20;

impl Pattern {
    pub(crate) fn new(source: &str, options: &str) -> Result<Self, QueryError> {
        if source.contains('\0') {
            return Err(QueryError::bad_value("Regular expression cannot contain an embedded null byte"));
        }
        let mut builder = regex::RegexBuilder::new(&translate(source)?);
        for flag in options.chars() {
            match flag {
                'i' => builder.case_insensitive(true),
                'm' => builder.multi_line(true),
                's' => builder.dot_matches_new_line(true),
                'x' => builder.ignore_whitespace(true),
                // PCRE runs in UTF-8 mode anyway; drivers may send it.
                'u' => &mut builder,
                other => {
                    return Err(QueryError::bad_value(format!("invalid flag in regex options: {other}")));
                }
            };
        }
        builder.size_limit(REGEX_SIZE_LIMIT_BYTES);
        let compiled = builder.build().map_err(|e| {
            QueryError::bad_value(format!("Regular expression is invalid: {}", one_line(&e.to_string())))
        })?;
        Ok(Self { source: source.to_owned(), options: options.to_owned(), compiled })
    }

    /// The compiled program, for the aggregation operators that want captures and offsets.
    pub(crate) fn compiled(&self) -> &regex::Regex {
        &self.compiled
    }

    pub(crate) fn matches_str(&self, s: &str) -> bool {
        self.compiled.is_match(s)
    }

    /// MongoDB's `RegexMatchExpression::matchesSingleElement`.
    pub(crate) fn matches_value(&self, v: &Bson) -> bool {
        match v {
            Bson::String(s) | Bson::Symbol(s) => self.compiled.is_match(s),
            Bson::RegularExpression(r) => r.pattern.as_str() == self.source && r.options.as_str() == self.options,
            _ => false,
        }
    }
}

fn one_line(s: &str) -> String {
    // The crate's messages draw the pattern over several lines; keep them on one.
    s.split('\n').map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// Rewrites PCRE-only spellings into the `regex` crate's syntax (see the module header).
fn translate(source: &str) -> Result<String, QueryError> {
    let mut out = String::with_capacity(source.len() + 8);
    let mut chars = source.chars().peekable();
    // Some(n): inside a character class, n characters after its opening `[` (and `^`).
    let mut class: Option<usize> = None;
    // Whether the previous token was a `*`, `+` or `?` quantifier, so a `+` now would make it
    // possessive, which the crate would silently read as a nested repetition instead.
    let mut after_quantifier = false;
    let mut prev_open_paren = false;
    // Whether the previous token was a quantifier or a quantifier's `?` / `+` modifier: a `*` then
    // repeats nothing, which PCRE refuses ("a**") and the crate would read as a nested repetition.
    let mut prev_quantified = false;
    while let Some(c) = chars.next() {
        let quantifier = class.is_none() && matches!(c, '*' | '+' | '?') && !prev_open_paren;
        if quantifier && c == '+' && after_quantifier {
            return Err(QueryError::bad_value(
                "Regular expression is invalid: possessive quantifiers are not supported",
            ));
        }
        if quantifier && c == '*' && prev_quantified {
            return Err(QueryError::bad_value(
                "Regular expression is invalid: quantifier does not follow a repeatable item",
            ));
        }
        prev_quantified = quantifier;
        after_quantifier = quantifier && !(c == '?' && after_quantifier);
        prev_open_paren = class.is_none() && c == '(';
        match (c, class) {
            ('\\', _) => {
                after_quantifier = false;
                let Some(e) = chars.next() else {
                    return Err(QueryError::bad_value("Regular expression is invalid: \\ at end of pattern"));
                };
                match e {
                    'Q' => {
                        let mut literal = String::new();
                        while let Some(q) = chars.next() {
                            if q == '\\' && chars.peek() == Some(&'E') {
                                chars.next();
                                break;
                            }
                            literal.push(q);
                        }
                        out.push_str(&regex::escape(&literal));
                    }
                    'E' => {}
                    'Z' if class.is_none() => out.push_str(r"(?:\n?\z)"),
                    _ => {
                        out.push('\\');
                        out.push(e);
                    }
                }
                if let Some(n) = class.as_mut() {
                    *n += 1;
                }
            }
            ('[', None) => {
                out.push('[');
                if chars.peek() == Some(&'^') {
                    chars.next();
                    out.push('^');
                }
                class = Some(0);
            }
            ('[', Some(n)) => {
                if chars.peek() == Some(&':') {
                    // A POSIX class such as [:alpha:], copied through its closing `:]`.
                    out.push('[');
                    for p in chars.by_ref() {
                        out.push(p);
                        if p == ']' {
                            break;
                        }
                    }
                } else {
                    out.push_str(r"\[");
                }
                class = Some(n + 1);
            }
            (']', Some(0)) => {
                // PCRE: a `]` right after `[` or `[^` is a literal.
                out.push_str(r"\]");
                class = Some(1);
            }
            (']', Some(_)) => {
                out.push(']');
                class = None;
            }
            ('&' | '~', Some(n)) => {
                out.push('\\');
                out.push(c);
                class = Some(n + 1);
            }
            ('-', Some(n)) if chars.peek() == Some(&'-') => {
                out.push_str(r"\-");
                class = Some(n + 1);
            }
            (_, Some(n)) => {
                out.push(c);
                class = Some(n + 1);
            }
            ('{', None) => {
                // A counted repetition `{n}`, `{n,}`, `{n,m}` is a quantifier too.
                let body: String = chars.clone().take_while(|&ch| ch != '}').collect();
                let counted = chars.clone().nth(body.len()) == Some('}')
                    && body.split_once(',').map_or(body.as_str(), |(n, _)| n).parse::<u32>().is_ok()
                    && body.split_once(',').is_none_or(|(_, m)| m.is_empty() || m.parse::<u32>().is_ok());
                out.push('{');
                if counted {
                    out.push_str(&body);
                    out.push('}');
                    for _ in 0..=body.len() {
                        chars.next();
                    }
                    after_quantifier = true;
                }
            }
            ('$', None) => out.push_str(r"(?:$|\n\z)"),
            (_, None) => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_match(pattern: &str, options: &str, s: &str) -> bool {
        Pattern::new(pattern, options).expect("valid pattern").matches_value(&Bson::String(s.into()))
    }

    #[test]
    fn options() {
        assert!(is_match("^ab", "i", "ABc"));
        assert!(!is_match("^b", "", "a\nb"));
        assert!(is_match("^b", "m", "a\nb"));
        assert!(!is_match("a.b", "", "a\nb"));
        assert!(is_match("a.b", "s", "a\nb"));
        assert!(is_match("a b # comment", "x", "ab"));
        let err = Pattern::new("a", "z").expect_err("bad flag");
        assert_eq!(err.message, "invalid flag in regex options: z");
    }

    #[test]
    fn pcre_spellings() {
        assert!(is_match(r"\Qa.b\E$", "", "xa.b"));
        assert!(!is_match(r"\Qa.b\E", "", "axb"));
        assert!(is_match("b$", "", "ab\n"));
        assert!(is_match(r"b\Z", "", "ab\n"));
        assert!(is_match("[]a]", "", "]"));
        assert!(is_match("[^]a]", "", "b"));
        assert!(is_match("[a&&b]", "", "&"));
        assert!(is_match("[[:digit:]x]", "", "5"));
        assert!(is_match("[a[]", "", "["));
        assert!(is_match(r"[\]]", "", "]"));
    }

    #[test]
    fn unsupported_features_are_refused() {
        for p in [r"(a)\1", "a(?=b)", "(?<!a)b", "a*+", "(?>a)", "a{2}+", "a{1,}+", "a**", "a+*", "a?*", "a*?*"] {
            let err = Pattern::new(p, "").expect_err(p);
            assert_eq!(err.code, shoal_proto::ErrorCode::BadValue, "{p}");
            assert!(err.message.starts_with("Regular expression is invalid"), "{p}: {}", err.message);
        }
        assert!(Pattern::new("a\0", "").is_err());
        for ok in [r"a+?b", r"\++", "(?i)a+", "[+]+", "a?b+", "a{2}?", "a{2}b+", r"\{2}+", r"a*\*", "[*]*", "a*b*"] {
            assert!(Pattern::new(ok, "").is_ok(), "{ok}");
        }
    }

    #[test]
    fn regex_values_match_by_identity() {
        let p = Pattern::new("^a", "i").expect("valid pattern");
        let same = Bson::RegularExpression(bson::Regex {
            pattern: "^a".try_into().expect("no NUL"),
            options: "i".try_into().expect("no NUL"),
        });
        assert!(p.matches_value(&same));
        assert!(!p.matches_value(&Bson::Int32(1)));
    }
}
