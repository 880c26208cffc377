//! Unit tests of the operator families: normal cases, null and missing, and the error each
//! wrong type gives.

use bson::{Bson, DateTime, Document, bson, doc};
use proptest::prelude::*;
use shoal_proto::ErrorCode;

use crate::aggregate::expr::Expr;

fn root() -> Document {
    doc! {
        "n": 5, "neg": -3, "f": 2.5, "s": "héllo", "arr": [3, 1, 2], "nul": null,
        "d": DateTime::from_millis(1_709_251_199_123), // 2024-02-29T23:59:59.123Z (Thursday)
        "o": {"a": 1, "b.c": 2},
    }
}

fn ev(expr: Bson) -> Option<Bson> {
    Expr::parse(&expr).unwrap().eval(&root()).unwrap()
}

fn v(expr: Bson) -> Bson {
    ev(expr).expect("a value, not missing")
}

fn err(expr: Bson) -> ErrorCode {
    match Expr::parse(&expr) {
        Err(e) => e.code,
        Ok(e) => e.eval(&root()).unwrap_err().code,
    }
}

fn date(ms: i64) -> Bson {
    Bson::DateTime(DateTime::from_millis(ms))
}

#[test]
fn math() {
    assert_eq!(v(bson!({"$abs": "$neg"})), bson!(3));
    assert_eq!(v(bson!({"$abs": i32::MIN})), Bson::Int64(2_147_483_648));
    assert_eq!(err(bson!({"$abs": i64::MIN})), ErrorCode::BadValue);
    assert_eq!(v(bson!({"$abs": "$missing"})), Bson::Null);
    assert_eq!(err(bson!({"$abs": "x"})), ErrorCode::TypeMismatch);
    assert_eq!(v(bson!({"$ceil": 1.2})), bson!(2.0));
    assert_eq!(v(bson!({"$floor": -1.2})), bson!(-2.0));
    assert_eq!(v(bson!({"$floor": 7})), bson!(7));
    assert_eq!(v(bson!({"$sqrt": 16})), bson!(4.0));
    assert_eq!(err(bson!({"$sqrt": -1})), ErrorCode::BadValue);
    assert_eq!(v(bson!({"$exp": 0})), bson!(1.0));
    assert_eq!(v(bson!({"$ln": 1})), bson!(0.0));
    assert_eq!(v(bson!({"$log10": 1000})), bson!(3.0));
    assert_eq!(v(bson!({"$log": [8, 2]})), bson!(3.0));
    assert_eq!(err(bson!({"$log": [8, 1]})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$ln": 0})), ErrorCode::BadValue);
    assert_eq!(v(bson!({"$log": [8, null]})), Bson::Null);
    assert_eq!(err(bson!({"$log": [8]})), ErrorCode::BadValue);
}

#[test]
fn pow_widens_and_refuses() {
    assert_eq!(v(bson!({"$pow": [2, 10]})), bson!(1024));
    assert_eq!(v(bson!({"$pow": [2, 40]})), Bson::Int64(1 << 40));
    assert_eq!(v(bson!({"$pow": [2, 70]})), bson!(2f64.powi(70)));
    assert_eq!(v(bson!({"$pow": [2, -1]})), bson!(0.5));
    assert_eq!(v(bson!({"$pow": [-1, -3]})), bson!(-1));
    assert_eq!(v(bson!({"$pow": [2.0, 2]})), bson!(4.0));
    assert_eq!(err(bson!({"$pow": [0, -1]})), ErrorCode::BadValue);
    assert_eq!(v(bson!({"$pow": [i64::MAX, i64::MAX]})), Bson::Double((i64::MAX as f64).powf(i64::MAX as f64)));
}

#[test]
fn round_and_trunc() {
    assert_eq!(v(bson!({"$round": 10.5})), bson!(10.0));
    assert_eq!(v(bson!({"$round": 11.5})), bson!(12.0));
    assert_eq!(v(bson!({"$round": -2.5})), bson!(-2.0));
    assert_eq!(v(bson!({"$round": [2.675, 2]})), bson!(2.68));
    assert_eq!(v(bson!({"$round": [19.25, 1]})), bson!(19.2));
    assert_eq!(v(bson!({"$round": [1234.5678, -2]})), bson!(1200.0));
    assert_eq!(v(bson!({"$round": [1250, -2]})), bson!(1200));
    assert_eq!(v(bson!({"$round": [1350, -2]})), bson!(1400));
    assert_eq!(v(bson!({"$round": [-1350, -2]})), bson!(-1400));
    assert_eq!(v(bson!({"$round": [7, 2]})), bson!(7));
    assert_eq!(v(bson!({"$round": [0.4, 0]})), bson!(0.0));
    assert_eq!(v(bson!({"$round": [9.99, 1]})), bson!(10.0));
    assert_eq!(v(bson!({"$round": [2147483647, -1]})), Bson::Int64(2_147_483_650));
    assert_eq!(v(bson!({"$trunc": 2.9})), bson!(2.0));
    assert_eq!(v(bson!({"$trunc": [-2.987, 2]})), bson!(-2.98));
    assert_eq!(v(bson!({"$trunc": [1299, -2]})), bson!(1200));
    assert_eq!(v(bson!({"$round": [2.5, null]})), Bson::Null);
    assert_eq!(v(bson!({"$round": [null, 1]})), Bson::Null);
    assert_eq!(err(bson!({"$round": [2.5, 1.5]})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$round": [2.5, 100]})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$round": [1, 2, 3]})), ErrorCode::BadValue);
    assert!(matches!(v(bson!({"$round": f64::NAN})), Bson::Double(f) if f.is_nan()));
}

#[test]
fn trigonometry() {
    assert_eq!(v(bson!({"$sin": 0})), bson!(0.0));
    assert_eq!(v(bson!({"$cos": 0})), bson!(1.0));
    assert_eq!(v(bson!({"$atan2": [1, 1]})), bson!(std::f64::consts::FRAC_PI_4));
    assert_eq!(v(bson!({"$degreesToRadians": 180})), bson!(std::f64::consts::PI));
    assert_eq!(v(bson!({"$radiansToDegrees": std::f64::consts::PI})), bson!(180.0));
    assert_eq!(v(bson!({"$acosh": 1})), bson!(0.0));
    assert_eq!(err(bson!({"$asin": 2})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$acosh": 0.5})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$sin": f64::INFINITY})), ErrorCode::BadValue);
    assert_eq!(v(bson!({"$tanh": null})), Bson::Null);
    assert_eq!(err(bson!({"$cos": "x"})), ErrorCode::TypeMismatch);
}

#[test]
fn misc() {
    assert_eq!(v(bson!({"$cmp": [1, 2]})), bson!(-1));
    assert_eq!(v(bson!({"$cmp": ["b", "a"]})), bson!(1));
    assert_eq!(v(bson!({"$cmp": ["$missing", null]})), bson!(-1));
    assert_eq!(v(bson!({"$sum": "$arr"})), bson!(6));
    assert_eq!(v(bson!({"$sum": [1, "x", 2.5, null]})), bson!(3.5));
    assert_eq!(v(bson!({"$sum": [i64::MAX, 1]})), bson!(i64::MAX as f64 + 1.0));
    assert_eq!(v(bson!({"$sum": "$missing"})), bson!(0));
    assert_eq!(v(bson!({"$avg": "$arr"})), bson!(2.0));
    assert_eq!(v(bson!({"$avg": ["x"]})), Bson::Null);
    assert_eq!(v(bson!({"$max": "$arr"})), bson!(3));
    assert_eq!(v(bson!({"$min": [4, null, 2]})), bson!(2));
    assert_eq!(v(bson!({"$max": [null, "$missing"]})), Bson::Null);
    assert_eq!(v(bson!({"$max": [[1, 2], 5]})), bson!([1, 2]));
    assert_eq!(v(bson!({"$mergeObjects": [{"a": 1}, null, {"a": 2, "b": 3}]})), bson!({"a": 2, "b": 3}));
    assert_eq!(err(bson!({"$mergeObjects": [{"a": 1}, 5]})), ErrorCode::TypeMismatch);
    assert_eq!(v(bson!({"$getField": {"field": "b.c", "input": "$o"}})), bson!(2));
    assert_eq!(v(bson!({"$getField": "n"})), bson!(5));
    assert_eq!(v(bson!({"$getField": {"$literal": "n"}})), bson!(5));
    assert_eq!(ev(bson!({"$getField": {"field": "zz", "input": "$o"}})), None);
    assert_eq!(v(bson!({"$getField": {"field": "a", "input": null}})), Bson::Null);
    assert_eq!(err(bson!({"$getField": {"field": 1, "input": "$o"}})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$getField": {"field": "a", "input": 3}})), ErrorCode::TypeMismatch);
    assert_eq!(err(bson!({"$getField": {"input": "$o"}})), ErrorCode::FailedToParse);
    assert_eq!(err(bson!({"$getField": {"field": "a", "nope": 1}})), ErrorCode::FailedToParse);
    assert_eq!(
        v(bson!({"$setField": {"field": {"$literal": "$x"}, "input": "$o", "value": 9}})),
        bson!({"a": 1, "b.c": 2, "$x": 9})
    );
    assert_eq!(v(bson!({"$setField": {"field": "a", "input": "$o", "value": "$$REMOVE"}})), bson!({"b.c": 2}));
    assert_eq!(v(bson!({"$unsetField": {"field": "b.c", "input": "$o"}})), bson!({"a": 1}));
    assert_eq!(v(bson!({"$unsetField": {"field": "b.c", "input": null}})), Bson::Null);
    assert_eq!(v(bson!({"$isNumber": "$f"})), bson!(true));
    assert_eq!(v(bson!({"$isNumber": "$missing"})), bson!(false));
    assert_eq!(v(bson!({"$isArray": ["$arr"]})), bson!(true));
    assert_eq!(v(bson!({"$isArray": "$s"})), bson!(false));
    let Bson::Double(r) = v(bson!({"$rand": {}})) else { panic!("$rand gives a double") };
    assert!((0.0..1.0).contains(&r));
    assert_eq!(err(bson!({"$rand": {"x": 1}})), ErrorCode::BadValue);
}

#[test]
fn bits_sizes_and_timestamps() {
    assert_eq!(v(bson!({"$bitAnd": [12, 10]})), bson!(8));
    assert_eq!(v(bson!({"$bitOr": [12, Bson::Int64(3)]})), Bson::Int64(15));
    assert_eq!(v(bson!({"$bitXor": [12, 10]})), bson!(6));
    assert_eq!(v(bson!({"$bitNot": 0})), bson!(-1));
    assert_eq!(v(bson!({"$bitAnd": []})), bson!(-1));
    assert_eq!(v(bson!({"$bitOr": [1, null]})), Bson::Null);
    assert_eq!(err(bson!({"$bitAnd": [1, 1.0]})), ErrorCode::TypeMismatch);
    assert_eq!(v(bson!({"$bsonSize": {"$literal": {"a": 1}}})), bson!(12));
    assert_eq!(v(bson!({"$bsonSize": null})), Bson::Null);
    assert_eq!(err(bson!({"$bsonSize": 1})), ErrorCode::TypeMismatch);
    assert_eq!(v(bson!({"$binarySize": "$s"})), bson!(6));
    let ts = Bson::Timestamp(bson::Timestamp { time: 7, increment: 3 });
    assert_eq!(v(bson!({"$tsSecond": ts.clone()})), Bson::Int64(7));
    assert_eq!(v(bson!({"$tsIncrement": ts})), Bson::Int64(3));
    assert_eq!(err(bson!({"$tsSecond": 1})), ErrorCode::TypeMismatch);
}

#[test]
fn strings() {
    assert_eq!(v(bson!({"$strLenBytes": "$s"})), bson!(6));
    assert_eq!(v(bson!({"$strLenCP": "$s"})), bson!(5));
    assert_eq!(err(bson!({"$strLenCP": null})), ErrorCode::TypeMismatch);
    assert_eq!(v(bson!({"$substrCP": ["$s", 1, 3]})), bson!("éll"));
    assert_eq!(v(bson!({"$substrCP": [null, 1, 3]})), bson!(""));
    assert_eq!(err(bson!({"$substrCP": ["$s", -1, 3]})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$substrCP": ["$s", "a", 3]})), ErrorCode::TypeMismatch);
    assert_eq!(v(bson!({"$indexOfBytes": ["$s", "l"]})), bson!(3));
    assert_eq!(v(bson!({"$indexOfCP": ["$s", "l"]})), bson!(2));
    assert_eq!(v(bson!({"$indexOfCP": ["$s", "l", 3]})), bson!(3));
    assert_eq!(v(bson!({"$indexOfCP": ["$s", "l", 0, 2]})), bson!(-1));
    assert_eq!(v(bson!({"$indexOfCP": ["$s", "z"]})), bson!(-1));
    assert_eq!(v(bson!({"$indexOfCP": ["abc", ""]})), bson!(0));
    assert_eq!(v(bson!({"$indexOfBytes": [null, "a"]})), Bson::Null);
    assert_eq!(err(bson!({"$indexOfBytes": [1, "a"]})), ErrorCode::TypeMismatch);
    assert_eq!(v(bson!({"$split": ["a-b--c", "-"]})), bson!(["a", "b", "", "c"]));
    assert_eq!(v(bson!({"$split": [null, "-"]})), Bson::Null);
    assert_eq!(err(bson!({"$split": ["a", ""]})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$split": [1, "-"]})), ErrorCode::TypeMismatch);
    assert_eq!(v(bson!({"$trim": {"input": " \u{3000}x y\t\n"}})), bson!("x y"));
    assert_eq!(v(bson!({"$ltrim": {"input": "xxaxx", "chars": "x"}})), bson!("axx"));
    assert_eq!(v(bson!({"$rtrim": {"input": "xxaxy", "chars": "xy"}})), bson!("xxa"));
    assert_eq!(v(bson!({"$trim": {"input": null}})), Bson::Null);
    assert_eq!(err(bson!({"$trim": {"input": 5}})), ErrorCode::TypeMismatch);
    assert_eq!(err(bson!({"$trim": "x"})), ErrorCode::FailedToParse);
    assert_eq!(v(bson!({"$strcasecmp": ["ABC", "abc"]})), bson!(0));
    assert_eq!(v(bson!({"$strcasecmp": ["a", "B"]})), bson!(-1));
    assert_eq!(v(bson!({"$replaceOne": {"input": "aXbX", "find": "X", "replacement": "-"}})), bson!("a-bX"));
    assert_eq!(v(bson!({"$replaceAll": {"input": "aXbX", "find": "X", "replacement": "-"}})), bson!("a-b-"));
    assert_eq!(v(bson!({"$replaceAll": {"input": null, "find": "X", "replacement": "-"}})), Bson::Null);
    assert_eq!(err(bson!({"$replaceAll": {"input": "a", "find": 1, "replacement": "-"}})), ErrorCode::TypeMismatch);
}

#[test]
fn regex() {
    assert_eq!(v(bson!({"$regexMatch": {"input": "$s", "regex": "^H", "options": "i"}})), bson!(true));
    assert_eq!(v(bson!({"$regexMatch": {"input": null, "regex": "a"}})), bson!(false));
    let re =
        Bson::RegularExpression(bson::Regex { pattern: "L+".try_into().unwrap(), options: "i".try_into().unwrap() });
    assert_eq!(
        v(bson!({"$regexFind": {"input": "$s", "regex": re.clone()}})),
        bson!({"match": "ll", "idx": 2, "captures": []})
    );
    assert_eq!(err(bson!({"$regexFind": {"input": "$s", "regex": re, "options": "m"}})), ErrorCode::BadValue);
    assert_eq!(
        v(bson!({"$regexFindAll": {"input": "a1b22", "regex": "([a-z])(\\d+)?"}})),
        bson!([
            {"match": "a1", "idx": 0, "captures": ["a", "1"]},
            {"match": "b22", "idx": 2, "captures": ["b", "22"]},
        ])
    );
    assert_eq!(
        v(bson!({"$regexFind": {"input": "x", "regex": "(y)?x"}})),
        bson!({"match": "x", "idx": 0, "captures": [null]})
    );
    assert_eq!(v(bson!({"$regexFind": {"input": "abc", "regex": "z"}})), Bson::Null);
    assert_eq!(v(bson!({"$regexFindAll": {"input": null, "regex": "z"}})), bson!([]));
    assert_eq!(err(bson!({"$regexMatch": {"input": 5, "regex": "z"}})), ErrorCode::TypeMismatch);
    assert_eq!(err(bson!({"$regexMatch": {"input": "a", "regex": "(?=a)"}})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$regexMatch": {"input": "a"}})), ErrorCode::FailedToParse);
    // A constant pattern is checked once, at parse time.
    assert!(Expr::parse(&bson!({"$regexFind": {"input": "$x", "regex": "(a"}})).is_err());
    assert!(Expr::parse(&bson!({"$regexFind": {"input": "$x", "regex": "$pattern"}})).is_ok());
}

#[test]
fn arrays() {
    assert_eq!(v(bson!({"$concatArrays": ["$arr", [4]]})), bson!([3, 1, 2, 4]));
    assert_eq!(v(bson!({"$concatArrays": ["$arr", "$missing"]})), Bson::Null);
    assert_eq!(err(bson!({"$concatArrays": ["$arr", 1]})), ErrorCode::TypeMismatch);
    assert_eq!(v(bson!({"$first": "$arr"})), bson!(3));
    assert_eq!(v(bson!({"$last": "$arr"})), bson!(2));
    assert_eq!(ev(bson!({"$last": [[]]})), None);
    assert_eq!(v(bson!({"$first": "$missing"})), Bson::Null);
    assert_eq!(err(bson!({"$first": "$n"})), ErrorCode::TypeMismatch);
    assert_eq!(v(bson!({"$firstN": {"input": "$arr", "n": 2}})), bson!([3, 1]));
    assert_eq!(v(bson!({"$lastN": {"input": "$arr", "n": 5}})), bson!([3, 1, 2]));
    assert_eq!(v(bson!({"$maxN": {"input": [1, null, 5, 3], "n": 2}})), bson!([5, 3]));
    assert_eq!(v(bson!({"$minN": {"input": "$arr", "n": 2}})), bson!([1, 2]));
    assert_eq!(err(bson!({"$firstN": {"input": "$arr", "n": 0}})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$firstN": {"input": 1, "n": 1}})), ErrorCode::TypeMismatch);
    assert_eq!(v(bson!({"$indexOfArray": ["$arr", 2]})), bson!(2));
    assert_eq!(v(bson!({"$indexOfArray": ["$arr", 3, 1]})), bson!(-1));
    assert_eq!(v(bson!({"$indexOfArray": [null, 3]})), Bson::Null);
    assert_eq!(err(bson!({"$indexOfArray": ["$arr", 3, -1]})), ErrorCode::BadValue);
    assert_eq!(v(bson!({"$range": [0, 10, 3]})), bson!([0, 3, 6, 9]));
    assert_eq!(v(bson!({"$range": [5, 0, -2]})), bson!([5, 3, 1]));
    assert_eq!(v(bson!({"$range": [0, -5]})), bson!([]));
    assert_eq!(err(bson!({"$range": [0, 5, 0]})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$range": [0, 1.5]})), ErrorCode::TypeMismatch);
    assert_eq!(err(bson!({"$range": [i32::MIN, i32::MAX]})), ErrorCode::ExceededMemoryLimit);
    assert_eq!(v(bson!({"$reverseArray": "$arr"})), bson!([2, 1, 3]));
    assert_eq!(v(bson!({"$reverseArray": null})), Bson::Null);
    assert_eq!(v(bson!({"$slice": ["$arr", -2]})), bson!([1, 2]));
    assert_eq!(v(bson!({"$slice": ["$arr", 1, 1]})), bson!([1]));
    assert_eq!(v(bson!({"$slice": ["$arr", -10, 2]})), bson!([3, 1]));
    assert_eq!(err(bson!({"$slice": ["$arr", 1, 0]})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$slice": [1, 1]})), ErrorCode::TypeMismatch);
    assert_eq!(v(bson!({"$zip": {"inputs": [[1, 2], ["a"]]}})), bson!([[1, "a"]]));
    assert_eq!(
        v(bson!({"$zip": {"inputs": [[1, 2], ["a"]], "useLongestLength": true, "defaults": [0, "z"]}})),
        bson!([[1, "a"], [2, "z"]])
    );
    assert_eq!(v(bson!({"$zip": {"inputs": [[1], "$missing"]}})), Bson::Null);
    assert_eq!(err(bson!({"$zip": {"inputs": [[1]], "defaults": [1]}})), ErrorCode::BadValue);
    assert_eq!(v(bson!({"$arrayToObject": [[["a", 1], {"k": "b", "v": 2}, ["a", 3]]]})), bson!({"a": 3, "b": 2}));
    assert_eq!(err(bson!({"$arrayToObject": [[[1, 1]]]})), ErrorCode::TypeMismatch);
    assert_eq!(v(bson!({"$objectToArray": "$o"})), bson!([{"k": "a", "v": 1}, {"k": "b.c", "v": 2}]));
    assert_eq!(err(bson!({"$objectToArray": 1})), ErrorCode::TypeMismatch);
    assert_eq!(v(bson!({"$sortArray": {"input": "$arr", "sortBy": -1}})), bson!([3, 2, 1]));
    assert_eq!(
        v(bson!({"$sortArray": {"input": [{"a": 2}, {"a": 1}], "sortBy": {"a": 1}}})),
        bson!([{"a": 1}, {"a": 2}])
    );
    assert_eq!(err(bson!({"$sortArray": {"input": "$arr", "sortBy": 2}})), ErrorCode::BadValue);
    assert_eq!(v(bson!({"$allElementsTrue": [[1, true, "x"]]})), bson!(true));
    assert_eq!(v(bson!({"$allElementsTrue": [[1, 0]]})), bson!(false));
    assert_eq!(v(bson!({"$anyElementTrue": [[0, null, []]]})), bson!(true));
    assert_eq!(err(bson!({"$anyElementTrue": [null]})), ErrorCode::TypeMismatch);
    assert_eq!(
        v(bson!({"$reduce": {"input": "$arr", "initialValue": 0, "in": {"$add": ["$$value", "$$this"]}}})),
        bson!(6)
    );
    assert_eq!(v(bson!({"$reduce": {"input": null, "initialValue": 0, "in": 1}})), Bson::Null);
    assert_eq!(err(bson!({"$reduce": {"input": [], "in": 1}})), ErrorCode::FailedToParse);
}

#[test]
fn sets() {
    assert_eq!(v(bson!({"$setUnion": [[1, 2, 2], [3, 1.0]]})), bson!([1, 2, 3]));
    assert_eq!(v(bson!({"$setUnion": [[1], null]})), Bson::Null);
    assert_eq!(v(bson!({"$setIntersection": [[1, 2, 3], [2, 3, 4], [3, 2]]})), bson!([2, 3]));
    assert_eq!(v(bson!({"$setIntersection": []})), bson!([]));
    assert_eq!(v(bson!({"$setDifference": [[1, 2, 3], [2]]})), bson!([1, 3]));
    assert_eq!(v(bson!({"$setEquals": [[1, 2], [2, 1, 1]]})), bson!(true));
    assert_eq!(v(bson!({"$setEquals": [[1, 2], [2]]})), bson!(false));
    assert_eq!(v(bson!({"$setIsSubset": [[1], [1, 2]]})), bson!(true));
    assert_eq!(err(bson!({"$setIsSubset": [null, [1, 2]]})), ErrorCode::TypeMismatch);
    assert_eq!(err(bson!({"$setEquals": [[1]]})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$setUnion": [[1], 1]})), ErrorCode::TypeMismatch);
}

#[test]
fn conversions() {
    assert_eq!(v(bson!({"$toBool": 0})), bson!(false));
    assert_eq!(v(bson!({"$toBool": ""})), bson!(true));
    assert_eq!(v(bson!({"$toBool": null})), Bson::Null);
    assert_eq!(err(bson!({"$toBool": [[]]})), ErrorCode::ConversionFailure);
    assert_eq!(v(bson!({"$toDouble": "2.5"})), bson!(2.5));
    assert_eq!(v(bson!({"$toDouble": true})), bson!(1.0));
    assert_eq!(v(bson!({"$toDouble": "$d"})), bson!(1_709_251_199_123.0));
    assert_eq!(err(bson!({"$toDouble": "abc"})), ErrorCode::ConversionFailure);
    assert_eq!(v(bson!({"$toLong": 2.9})), Bson::Int64(2));
    assert_eq!(v(bson!({"$toLong": "-42"})), Bson::Int64(-42));
    assert_eq!(err(bson!({"$toLong": 1e300})), ErrorCode::ConversionFailure);
    assert_eq!(v(bson!({"$toDate": "2024-02-29T23:59:59.123Z"})), date(1_709_251_199_123));
    assert_eq!(v(bson!({"$toDate": Bson::Int64(5)})), date(5));
    assert_eq!(err(bson!({"$toDate": 5})), ErrorCode::ConversionFailure);
    assert_eq!(v(bson!({"$toDecimal": 5})), Bson::Decimal128("5".parse().unwrap()));
    assert_eq!(v(bson!({"$toDecimal": 2.5})), Bson::Decimal128("2.50000000000000".parse().unwrap()));
    assert_eq!(err(bson!({"$toLong": Bson::Decimal128("5".parse().unwrap())})), ErrorCode::NotImplemented);
    let oid = bson::oid::ObjectId::parse_str("65e01a3f1c2b3d4e5f607182").unwrap();
    assert_eq!(v(bson!({"$toObjectId": "65e01a3f1c2b3d4e5f607182"})), Bson::ObjectId(oid));
    assert_eq!(err(bson!({"$toObjectId": "zz"})), ErrorCode::ConversionFailure);
    assert_eq!(v(bson!({"$convert": {"input": "12", "to": "int"}})), bson!(12));
    assert_eq!(v(bson!({"$convert": {"input": "12", "to": 18}})), Bson::Int64(12));
    assert_eq!(v(bson!({"$convert": {"input": "x", "to": "int", "onError": "bad"}})), bson!("bad"));
    assert_eq!(v(bson!({"$convert": {"input": null, "to": "int", "onNull": 0}})), bson!(0));
    assert_eq!(v(bson!({"$convert": {"input": "$missing", "to": "int"}})), Bson::Null);
    assert_eq!(err(bson!({"$convert": {"input": 1, "to": "nope", "onError": 0}})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$convert": {"input": "x", "to": "int"}})), ErrorCode::ConversionFailure);
    assert_eq!(err(bson!({"$convert": {"to": "int"}})), ErrorCode::FailedToParse);
}

#[test]
fn date_parts() {
    assert_eq!(v(bson!({"$hour": "$d"})), bson!(23));
    assert_eq!(v(bson!({"$minute": ["$d"]})), bson!(59));
    assert_eq!(v(bson!({"$second": {"date": "$d"}})), bson!(59));
    assert_eq!(v(bson!({"$millisecond": "$d"})), bson!(123));
    assert_eq!(v(bson!({"$dayOfWeek": "$d"})), bson!(5));
    assert_eq!(v(bson!({"$isoDayOfWeek": "$d"})), bson!(4));
    assert_eq!(v(bson!({"$dayOfYear": "$d"})), bson!(60));
    assert_eq!(v(bson!({"$week": "$d"})), bson!(8));
    assert_eq!(v(bson!({"$isoWeek": "$d"})), bson!(9));
    assert_eq!(v(bson!({"$isoWeekYear": "$d"})), bson!(2024));
    // 2021-01-01 is a Friday in ISO week 53 of 2020.
    assert_eq!(v(bson!({"$isoWeekYear": date(1_609_459_200_000)})), bson!(2020));
    assert_eq!(v(bson!({"$isoWeek": date(1_609_459_200_000)})), bson!(53));
    assert_eq!(v(bson!({"$hour": {"date": "$d", "timezone": "+05:30"}})), bson!(5));
    assert_eq!(v(bson!({"$dayOfWeek": {"date": "$d", "timezone": "+01"}})), bson!(6));
    assert_eq!(v(bson!({"$hour": null})), Bson::Null);
    assert_eq!(err(bson!({"$hour": "x"})), ErrorCode::Location16006);
    // Olson names: Paris is +01:00 in February, so 23:59 UTC is already the next day there.
    assert_eq!(v(bson!({"$hour": {"date": "$d", "timezone": "Europe/Paris"}})), bson!(0));
    assert_eq!(v(bson!({"$dayOfMonth": {"date": "$d", "timezone": "Europe/Paris"}})), bson!(1));
    assert_eq!(v(bson!({"$month": {"date": "$d", "timezone": "Asia/Tokyo"}})), bson!(3));
    assert_eq!(v(bson!({"$year": {"date": "$d", "timezone": "America/New_York"}})), bson!(2024));
    assert_eq!(
        v(bson!({"$dateToString": {"date": "$d", "format": "%Y-%m-%d %H:%M %z %Z", "timezone": "America/New_York"}})),
        bson!("2024-02-29 18:59 -0500 -300")
    );
    assert_eq!(err(bson!({"$hour": {"date": "$d", "timezone": "Mars/Olympus"}})), ErrorCode::Location40485);
    // A day added across New York's spring change keeps the wall-clock time (23 hours later);
    // 24 hours are 24 hours.
    let noon = date(1_710_003_600_000); // 2024-03-09T12:00 EST
    let add = |unit: &str, amount: i32| {
        v(
            bson!({"$dateAdd": {"startDate": noon.clone(), "unit": unit, "amount": amount, "timezone": "America/New_York"}}),
        )
    };
    assert_eq!(add("day", 1), date(1_710_086_400_000)); // 2024-03-10T12:00 EDT
    assert_eq!(add("hour", 24), date(1_710_003_600_000 + 24 * 3_600_000));
    assert_eq!(
        v(bson!({"$dateToParts": {"date": "$d"}})),
        bson!({"year": 2024, "month": 2, "day": 29, "hour": 23, "minute": 59, "second": 59, "millisecond": 123})
    );
    assert_eq!(
        v(bson!({"$dateToParts": {"date": "$d", "iso8601": true}})),
        bson!({"isoWeekYear": 2024, "isoWeek": 9, "isoDayOfWeek": 4, "hour": 23, "minute": 59, "second": 59,
               "millisecond": 123})
    );
}

#[test]
fn date_arithmetic() {
    let jan31 = 1_706_659_200_000; // 2024-01-31T00:00:00Z
    let feb29 = 1_709_164_800_000; // 2024-02-29T00:00:00Z
    assert_eq!(v(bson!({"$dateAdd": {"startDate": date(jan31), "unit": "month", "amount": 1}})), date(feb29));
    assert_eq!(v(bson!({"$dateAdd": {"startDate": date(jan31), "unit": "day", "amount": 29}})), date(feb29));
    assert_eq!(v(bson!({"$dateSubtract": {"startDate": date(feb29), "unit": "hour", "amount": 696}})), date(jan31));
    assert_eq!(v(bson!({"$dateAdd": {"startDate": null, "unit": "day", "amount": 1}})), Bson::Null);
    assert_eq!(err(bson!({"$dateAdd": {"startDate": "$d", "unit": "day", "amount": 1.5}})), ErrorCode::TypeMismatch);
    assert_eq!(err(bson!({"$dateAdd": {"startDate": "$d", "unit": "fortnight", "amount": 1}})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$dateAdd": {"startDate": "$d", "unit": "day", "amount": i64::MAX}})), ErrorCode::Overflow);
    assert_eq!(err(bson!({"$dateAdd": {"startDate": "$d", "unit": "day"}})), ErrorCode::FailedToParse);
    let diff =
        |a: i64, b: i64, unit: &str| v(bson!({"$dateDiff": {"startDate": date(a), "endDate": date(b), "unit": unit}}));
    assert_eq!(diff(jan31, feb29, "month"), Bson::Int64(1));
    assert_eq!(diff(jan31, feb29, "day"), Bson::Int64(29));
    assert_eq!(diff(jan31, feb29, "week"), Bson::Int64(4));
    assert_eq!(diff(feb29, jan31, "hour"), Bson::Int64(-696));
    assert_eq!(diff(jan31, feb29, "year"), Bson::Int64(0));
    assert_eq!(diff(jan31 - 1, jan31, "day"), Bson::Int64(1));
    let trunc = |unit: &str, bin: i32| v(bson!({"$dateTrunc": {"date": "$d", "unit": unit, "binSize": bin}}));
    assert_eq!(trunc("day", 1), date(feb29));
    assert_eq!(trunc("month", 1), date(1_706_745_600_000)); // 2024-02-01
    assert_eq!(trunc("year", 1), date(1_704_067_200_000)); // 2024-01-01
    assert_eq!(trunc("quarter", 1), date(1_704_067_200_000));
    assert_eq!(trunc("hour", 6), date(feb29 + 18 * 3_600_000));
    assert_eq!(trunc("week", 1), date(1_708_819_200_000)); // Sunday 2024-02-25
    assert_eq!(
        v(bson!({"$dateTrunc": {"date": "$d", "unit": "week", "startOfWeek": "monday"}})),
        date(1_708_905_600_000)
    );
    assert_eq!(err(bson!({"$dateTrunc": {"date": "$d", "unit": "day", "binSize": 0}})), ErrorCode::BadValue);
}

#[test]
fn date_building_and_parsing() {
    assert_eq!(
        v(bson!({"$dateFromParts": {"year": 2024, "month": 2, "day": 29, "hour": 23, "minute": 59, "second": 59,
                                     "millisecond": 123}})),
        date(1_709_251_199_123)
    );
    assert_eq!(v(bson!({"$dateFromParts": {"year": 2023, "month": 14, "day": 0}})), date(1_706_659_200_000));
    assert_eq!(
        v(bson!({"$dateFromParts": {"isoWeekYear": 2024, "isoWeek": 9, "isoDayOfWeek": 4}})),
        date(1_709_164_800_000)
    );
    assert_eq!(
        v(bson!({"$dateFromParts": {"year": 2024, "month": 3, "day": 1, "timezone": "+01:00"}})),
        date(1_709_247_600_000)
    );
    assert_eq!(v(bson!({"$dateFromParts": {"year": null}})), Bson::Null);
    assert_eq!(err(bson!({"$dateFromParts": {"year": 0}})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$dateFromParts": {"year": 2000, "isoWeekYear": 2000}})), ErrorCode::FailedToParse);
    assert_eq!(err(bson!({"$dateFromParts": {"month": 1}})), ErrorCode::FailedToParse);
    assert_eq!(err(bson!({"$dateFromParts": {"year": "x"}})), ErrorCode::TypeMismatch);
    let parse = |s: &str| v(bson!({"$dateFromString": {"dateString": s}}));
    assert_eq!(parse("2024-02-29T23:59:59.123Z"), date(1_709_251_199_123));
    assert_eq!(parse("2024-02-29"), date(1_709_164_800_000));
    assert_eq!(parse("2024-03-01T00:59:59.123+01:00"), date(1_709_251_199_123));
    assert_eq!(parse("2024-02-29 23:59"), date(1_709_251_140_000));
    assert_eq!(
        v(bson!({"$dateFromString": {"dateString": "29/02/2024 23h", "format": "%d/%m/%Y %Hh"}})),
        date(1_709_247_600_000)
    );
    assert_eq!(
        v(bson!({"$dateFromString": {"dateString": "2024-02-29", "timezone": "-01:00"}})),
        date(1_709_168_400_000)
    );
    assert_eq!(v(bson!({"$dateFromString": {"dateString": "nope", "onError": "bad"}})), bson!("bad"));
    assert_eq!(v(bson!({"$dateFromString": {"dateString": null, "onNull": "none"}})), bson!("none"));
    assert_eq!(v(bson!({"$dateFromString": {"dateString": "$missing"}})), Bson::Null);
    assert_eq!(err(bson!({"$dateFromString": {"dateString": "2024-02-30"}})), ErrorCode::ConversionFailure);
    assert_eq!(
        err(bson!({"$dateFromString": {"dateString": "2024-02-29Z", "format": "%Y-%m-%d%z", "timezone": "+01"}})),
        ErrorCode::ConversionFailure
    );
    assert_eq!(err(bson!({"$dateFromString": {"dateString": 5}})), ErrorCode::ConversionFailure);
}

#[test]
fn arity_errors() {
    assert_eq!(err(bson!({"$abs": [1, 2]})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$indexOfCP": ["a"]})), ErrorCode::BadValue);
    assert_eq!(err(bson!({"$zip": [[1]]})), ErrorCode::FailedToParse);
    assert_eq!(err(bson!({"$substr": ["abc", 1, 1, 1]})), ErrorCode::BadValue);
    assert_eq!(v(bson!({"$substr": ["abc", 1, 1]})), bson!("b"));
}

proptest! {
    /// `$round` at a place never moves a double further than half a unit of that place, and
    /// `$trunc` never moves it away from zero.
    #[test]
    fn round_and_trunc_stay_close(x in -1.0e9f64..1.0e9, place in 0i32..6) {
        let unit = 10f64.powi(-place);
        let Bson::Double(r) = v(bson!({"$round": [x, place]})) else { panic!("a double") };
        prop_assert!((r - x).abs() <= unit / 2.0 + x.abs() * 1e-14);
        let Bson::Double(t) = v(bson!({"$trunc": [x, place]})) else { panic!("a double") };
        prop_assert!(t.abs() <= x.abs() + x.abs() * 1e-14);
        prop_assert!((t - x).abs() < unit + x.abs() * 1e-14);
    }

    /// `$dateFromParts` inverts `$dateToParts`, in both calendars.
    #[test]
    fn date_parts_round_trip(ms in -30_000_000_000_000i64..200_000_000_000_000, iso in any::<bool>()) {
        let d = date(ms);
        let parts = v(bson!({"$dateToParts": {"date": d.clone(), "iso8601": iso}}));
        let Bson::Document(parts) = parts else { panic!("a document") };
        let literal: Document = parts.into_iter().map(|(k, v)| (k, Bson::Document(doc! {"$literal": v}))).collect();
        prop_assert_eq!(v(bson!({"$dateFromParts": literal})), d);
    }

    /// Set operators agree with each other: A ∪ B ⊇ A, A ∩ B ⊆ A, (A − B) ∩ B = ∅.
    #[test]
    fn set_laws(a in proptest::collection::vec(0i32..20, 0..12), b in proptest::collection::vec(0i32..20, 0..12)) {
        let (a, b) = (Bson::from(a), Bson::from(b));
        let lit = |x: &Bson| bson!({"$literal": x.clone()});
        prop_assert_eq!(v(bson!({"$setIsSubset": [lit(&a), {"$setUnion": [lit(&a), lit(&b)]}]})), bson!(true));
        prop_assert_eq!(v(bson!({"$setIsSubset": [{"$setIntersection": [lit(&a), lit(&b)]}, lit(&a)]})), bson!(true));
        prop_assert_eq!(
            v(bson!({"$setIntersection": [{"$setDifference": [lit(&a), lit(&b)]}, lit(&b)]})),
            bson!([])
        );
    }
}
