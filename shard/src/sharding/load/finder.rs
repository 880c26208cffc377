//! The load split finder, as CockroachDB and TiKV choose a load-based split key: among a few
//! candidate keys taken from the sampled requests, the one that best balances the requests left
//! and right of it while few requests cross it. Pure: spans in, a key or the reason for none out.
//!
//! For a candidate `c`: `left` = spans entirely below `c`, `right` = spans entirely at or above
//! `c`, `contained` = spans that cross `c` (a split there would not spread them). The score is
//! `|left - right| / (left + right) + contained / total`; the lowest score wins among candidates
//! whose imbalance is below [`LOAD_SPLIT_IMBALANCE_MAX`] and whose crossing share is below
//! [`LOAD_SPLIT_CONTAINED_MAX`], given at least [`LOAD_SPLIT_SAMPLES_MIN`] samples.
//!
//! Must not: look at sizes, time or placement (the balancer weighs those).

use std::fmt;

/// Fewer samples than this say too little about where the load is.
pub const LOAD_SPLIT_SAMPLES_MIN: usize = 100;
/// Candidate keys tried per range (CockroachDB and TiKV keep 20).
pub const LOAD_SPLIT_CANDIDATES_MAX: usize = 20;
/// A split must leave each side with at least ~3/8 of the load.
pub const LOAD_SPLIT_IMBALANCE_MAX: f64 = 0.25;
/// A split that half the requests cross would not spread them.
pub const LOAD_SPLIT_CONTAINED_MAX: f64 = 0.5;

/// The shard-key span one request touched: the smallest and largest key of the documents it
/// read or wrote (equal for a point operation). Keys are shard-key keystrings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    pub first: Vec<u8>,
    pub last: Vec<u8>,
}

impl Span {
    pub fn point(key: Vec<u8>) -> Self {
        Self { first: key.clone(), last: key }
    }

    /// Whether the span touches `[min, max)`.
    pub fn touches(&self, min: &[u8], max: &[u8]) -> bool {
        self.first.as_slice() < max && self.last.as_slice() >= min
    }
}

/// Why no load split key was found.
#[derive(Clone, Debug, PartialEq)]
pub enum NoSplit {
    TooFewSamples {
        samples: usize,
    },
    /// The best candidate still left this share of imbalance: the load is on one key or one side.
    Imbalance {
        imbalance: f64,
    },
    /// Every balanced candidate is crossed by at least this share of the requests.
    TooManyContained {
        contained: f64,
    },
}

impl NoSplit {
    /// Whether the samples were enough and show that no split spreads the load (one hot key, or
    /// requests crossing every candidate), as opposed to too little evidence so far.
    pub fn is_unsplittable(&self) -> bool {
        !matches!(self, NoSplit::TooFewSamples { .. })
    }
}

impl fmt::Display for NoSplit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoSplit::TooFewSamples { samples } => {
                write!(f, "too few samples ({samples} < {LOAD_SPLIT_SAMPLES_MIN})")
            }
            NoSplit::Imbalance { imbalance } => {
                write!(f, "imbalance {imbalance:.2} >= {LOAD_SPLIT_IMBALANCE_MAX}: the load is on one key or one side")
            }
            NoSplit::TooManyContained { contained } => {
                write!(f, "too many spans cross the best key ({contained:.2} >= {LOAD_SPLIT_CONTAINED_MAX})")
            }
        }
    }
}

/// How one candidate splits the samples.
#[derive(Clone, Copy, Debug)]
struct Score {
    imbalance: f64,
    contained: f64,
}

impl Score {
    fn of(spans: &[Span], c: &[u8]) -> Self {
        let (mut left, mut right) = (0usize, 0usize);
        for s in spans {
            if s.last.as_slice() < c {
                left += 1;
            } else if s.first.as_slice() >= c {
                right += 1;
            }
        }
        let contained = spans.len() - left - right;
        let sides = left + right;
        let imbalance = if sides == 0 { 1.0 } else { left.abs_diff(right) as f64 / sides as f64 };
        Self { imbalance, contained: contained as f64 / spans.len() as f64 }
    }

    fn total(self) -> f64 {
        self.imbalance + self.contained
    }

    fn acceptable(self) -> bool {
        self.imbalance < LOAD_SPLIT_IMBALANCE_MAX && self.contained < LOAD_SPLIT_CONTAINED_MAX
    }
}

/// Up to [`LOAD_SPLIT_CANDIDATES_MAX`] distinct span starts above `min`, at evenly spaced
/// quantiles of the sampled starts (so a hot key is a candidate, weighted by how often it was hit).
fn candidates<'a>(spans: &'a [Span], min: &[u8]) -> Vec<&'a [u8]> {
    let mut starts: Vec<&[u8]> = spans.iter().map(|s| s.first.as_slice()).collect();
    starts.sort_unstable();
    let n = starts.len();
    let mut out: Vec<&[u8]> = if n <= LOAD_SPLIT_CANDIDATES_MAX {
        starts
    } else {
        (1..=LOAD_SPLIT_CANDIDATES_MAX).map(|i| starts[i * n / (LOAD_SPLIT_CANDIDATES_MAX + 1)]).collect()
    };
    out.dedup();
    out.retain(|c| *c > min);
    out
}

/// The load split key for the samples of one range `[min, ...)`, or why there is none. A key is
/// strictly above `min`, so it is a valid split point of the range.
pub fn find_split_key(spans: &[Span], min: &[u8]) -> Result<Vec<u8>, NoSplit> {
    if spans.len() < LOAD_SPLIT_SAMPLES_MIN {
        return Err(NoSplit::TooFewSamples { samples: spans.len() });
    }
    let mut best: Option<(&[u8], Score)> = None;
    // For the reason: the least crossed of the balanced candidates, else the least imbalanced.
    let mut least_contained: Option<f64> = None;
    let mut least_imbalance: f64 = 1.0;
    for c in candidates(spans, min) {
        let score = Score::of(spans, c);
        least_imbalance = least_imbalance.min(score.imbalance);
        if score.imbalance < LOAD_SPLIT_IMBALANCE_MAX {
            least_contained = Some(least_contained.map_or(score.contained, |m: f64| m.min(score.contained)));
        }
        if score.acceptable() && best.is_none_or(|(_, b)| score.total() < b.total()) {
            best = Some((c, score));
        }
    }
    match (best, least_contained) {
        (Some((key, _)), _) => Ok(key.to_vec()),
        (None, Some(contained)) => Err(NoSplit::TooManyContained { contained }),
        // No candidate (every request started at the range's lower bound) counts as all on one side.
        (None, None) => Err(NoSplit::Imbalance { imbalance: least_imbalance }),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn k(i: u32) -> Vec<u8> {
        i.to_be_bytes().to_vec()
    }

    fn points(keys: impl IntoIterator<Item = u32>) -> Vec<Span> {
        keys.into_iter().map(|i| Span::point(k(i))).collect()
    }

    #[test]
    fn uniform_point_load_splits_in_the_middle() {
        let spans = points((0..200).map(|i| i % 100));
        let key = find_split_key(&spans, &k(0)).expect("a key");
        let at = u32::from_be_bytes(key.try_into().expect("4 bytes"));
        assert!((40..=60).contains(&at), "split at {at}");
    }

    #[test]
    fn too_few_samples() {
        let e = find_split_key(&points(0..99), &k(0)).unwrap_err();
        assert_eq!(e, NoSplit::TooFewSamples { samples: 99 });
        assert_eq!(e.to_string(), "too few samples (99 < 100)");
        assert!(!e.is_unsplittable(), "too little evidence is not a failed split");
    }

    #[test]
    fn a_single_hot_key_has_no_split_key() {
        let e = find_split_key(&points(std::iter::repeat_n(7, 500)), &k(0)).unwrap_err();
        assert!(matches!(e, NoSplit::Imbalance { imbalance } if imbalance >= LOAD_SPLIT_IMBALANCE_MAX), "{e}");
        assert!(e.to_string().contains("the load is on one key or one side"));
        assert!(e.is_unsplittable());
        // The hot key is the range's lower bound: no candidate at all.
        let e = find_split_key(&points(std::iter::repeat_n(7, 500)), &k(7)).unwrap_err();
        assert!(matches!(e, NoSplit::Imbalance { .. }), "{e}");
    }

    #[test]
    fn a_mostly_hot_key_with_little_else_is_still_imbalanced() {
        let mut spans = points(std::iter::repeat_n(50, 450));
        spans.extend(points(0..50));
        assert!(matches!(find_split_key(&spans, &k(0)), Err(NoSplit::Imbalance { .. })));
    }

    #[test]
    fn long_scans_cross_every_balanced_key() {
        // Points at both ends balance only at keys that most scans cross.
        let mut spans = points(std::iter::repeat_n(10, 100));
        spans.extend(points(std::iter::repeat_n(2000, 100)));
        spans.extend((0..400).map(|i| Span { first: k(100 + i % 100), last: k(1900) }));
        let e = find_split_key(&spans, &k(0)).unwrap_err();
        assert!(matches!(e, NoSplit::TooManyContained { contained } if contained >= 0.5), "{e}");
        assert!(e.to_string().starts_with("too many spans cross the best key"));
    }

    #[test]
    fn two_hot_keys_split_between_them() {
        let mut spans = points(std::iter::repeat_n(10, 150));
        spans.extend(points(std::iter::repeat_n(90, 150)));
        assert_eq!(find_split_key(&spans, &k(0)), Ok(k(90)));
    }

    proptest! {
        #[test]
        fn a_found_key_is_inside_and_balanced(
            keys in proptest::collection::vec((0u32..1000, 0u32..30), 0..400),
            min in 0u32..500,
        ) {
            let spans: Vec<Span> = keys.iter().map(|(a, w)| Span { first: k(*a), last: k(a + w) }).collect();
            match find_split_key(&spans, &k(min)) {
                Ok(key) => {
                    prop_assert!(key > k(min));
                    prop_assert!(spans.len() >= LOAD_SPLIT_SAMPLES_MIN);
                    let s = Score::of(&spans, &key);
                    prop_assert!(s.acceptable());
                    prop_assert!(spans.iter().any(|sp| sp.first == key), "the key was sampled");
                }
                Err(NoSplit::TooFewSamples { samples }) => prop_assert!(samples < LOAD_SPLIT_SAMPLES_MIN),
                Err(NoSplit::Imbalance { imbalance }) => prop_assert!(imbalance >= LOAD_SPLIT_IMBALANCE_MAX),
                Err(NoSplit::TooManyContained { contained }) => prop_assert!(contained >= LOAD_SPLIT_CONTAINED_MAX),
            }
        }

        #[test]
        fn one_key_never_splits(key in 0u32..1000, n in 0usize..600, min in 0u32..1000) {
            prop_assert!(find_split_key(&points(std::iter::repeat_n(key, n)), &k(min)).is_err());
        }
    }
}
