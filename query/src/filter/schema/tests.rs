use bson::{Document, doc};
use shoal_proto::ErrorCode;

use crate::filter::Filter;

fn matches(schema: Document, d: Document) -> bool {
    Filter::parse(&doc! {"$jsonSchema": schema}).unwrap().matches(&d)
}

fn code(schema: bson::Bson) -> ErrorCode {
    Filter::parse(&doc! {"$jsonSchema": schema}).unwrap_err().code
}

#[test]
fn types_and_required() {
    let s = doc! {"bsonType": "object", "required": ["a"], "properties": {"a": {"bsonType": ["int", "long"]}, "b": {"type": "string"}}};
    assert!(matches(s.clone(), doc! {"a": 1}));
    assert!(matches(s.clone(), doc! {"a": 1_i64, "b": "x"}));
    assert!(!matches(s.clone(), doc! {"b": "x"}));
    assert!(!matches(s.clone(), doc! {"a": 1.5}));
    assert!(!matches(s.clone(), doc! {"a": 1, "b": 2}));
    assert!(matches(doc! {"properties": {"n": {"bsonType": "number"}}}, doc! {"n": 2.5}));
    assert!(!matches(doc! {"bsonType": "array"}, doc! {}));
    assert!(matches(doc! {"type": "object"}, doc! {}));
}

#[test]
fn keywords_only_constrain_their_type() {
    let s = doc! {"properties": {"a": {"minimum": 5, "maxLength": 2, "minItems": 1}}};
    assert!(matches(s.clone(), doc! {"a": 6}));
    assert!(!matches(s.clone(), doc! {"a": 4}));
    assert!(matches(s.clone(), doc! {"a": "xy"}));
    assert!(!matches(s.clone(), doc! {"a": "xyz"}));
    assert!(!matches(s.clone(), doc! {"a": []}));
    assert!(matches(s.clone(), doc! {"a": [1]}));
    assert!(matches(s.clone(), doc! {"a": null}));
    assert!(matches(s, doc! {}));
}

#[test]
fn numbers_strings_arrays() {
    let ex = doc! {"properties": {"a": {"minimum": 1, "exclusiveMinimum": true, "maximum": 3.5}}};
    assert!(!matches(ex.clone(), doc! {"a": 1}));
    assert!(matches(ex.clone(), doc! {"a": 1.01}));
    assert!(matches(ex.clone(), doc! {"a": 3.5}));
    assert!(!matches(ex, doc! {"a": 4_i64}));
    assert!(matches(doc! {"properties": {"s": {"pattern": "^a.c$", "minLength": 3}}}, doc! {"s": "abc"}));
    assert!(!matches(doc! {"properties": {"s": {"pattern": "^a.c$"}}}, doc! {"s": "abd"}));
    assert!(matches(doc! {"properties": {"s": {"minLength": 2}}}, doc! {"s": "éé"}));
    assert!(matches(doc! {"properties": {"m": {"multipleOf": 3}}}, doc! {"m": 9}));
    assert!(!matches(doc! {"properties": {"m": {"multipleOf": 3}}}, doc! {"m": 10}));
    let items = doc! {"properties": {"xs": {"items": {"bsonType": "int"}, "maxItems": 2, "uniqueItems": true}}};
    assert!(matches(items.clone(), doc! {"xs": [1, 2]}));
    assert!(!matches(items.clone(), doc! {"xs": [1, "2"]}));
    assert!(!matches(items.clone(), doc! {"xs": [1, 2, 3]}));
    assert!(!matches(items, doc! {"xs": [1, 1]}));
    let tuple =
        doc! {"properties": {"t": {"items": [{"bsonType": "string"}, {"bsonType": "int"}], "additionalItems": false}}};
    assert!(matches(tuple.clone(), doc! {"t": ["a", 1]}));
    assert!(matches(tuple.clone(), doc! {"t": ["a"]}));
    assert!(!matches(tuple.clone(), doc! {"t": ["a", 1, 2]}));
    assert!(!matches(tuple, doc! {"t": [1]}));
}

#[test]
fn enum_combinators_and_additional_properties() {
    let e = doc! {"properties": {"c": {"enum": ["red", 2, {"x": 1}]}}};
    assert!(matches(e.clone(), doc! {"c": "red"}));
    assert!(matches(e.clone(), doc! {"c": 2.0}));
    assert!(matches(e.clone(), doc! {"c": {"x": 1}}));
    let objects = doc! {"properties": {"o": {"enum": [{"a": 1, "b": {"c": 2, "d": 3}}]}}};
    assert!(matches(objects.clone(), doc! {"o": {"b": {"d": 3, "c": 2}, "a": 1}}));
    assert!(!matches(objects, doc! {"o": {"a": 1}}));
    assert!(matches(doc! {"enum": [{"_id": 1, "a": 2}]}, doc! {"a": 2, "_id": 1}));
    assert!(!matches(e, doc! {"c": "blue"}));
    let any = doc! {"properties": {"v": {"anyOf": [{"bsonType": "string"}, {"minimum": 10}]}}};
    assert!(matches(any.clone(), doc! {"v": "s"}));
    assert!(matches(any.clone(), doc! {"v": 11}));
    // A number below 10 fails `minimum`; it is not a string.
    assert!(!matches(any, doc! {"v": 3}));
    let one = doc! {"properties": {"v": {"oneOf": [{"minimum": 1}, {"maximum": 5}]}}};
    assert!(!matches(one.clone(), doc! {"v": 3}));
    assert!(matches(one, doc! {"v": 7}));
    assert!(matches(doc! {"not": {"required": ["z"]}}, doc! {"a": 1}));
    assert!(!matches(doc! {"allOf": [{"required": ["a"]}, {"required": ["b"]}]}, doc! {"a": 1}));
    let closed = doc! {"properties": {"_id": {}, "a": {}}, "patternProperties": {"^x": {"bsonType": "int"}}, "additionalProperties": false};
    assert!(matches(closed.clone(), doc! {"_id": 1, "a": 2, "x1": 3}));
    assert!(!matches(closed.clone(), doc! {"_id": 1, "x1": "s"}));
    assert!(!matches(closed, doc! {"_id": 1, "b": 2}));
    let typed_extra = doc! {"properties": {"a": {}}, "additionalProperties": {"bsonType": "string"}};
    assert!(matches(typed_extra.clone(), doc! {"a": 1, "b": "s"}));
    assert!(!matches(typed_extra, doc! {"a": 1, "b": 2}));
    assert!(matches(doc! {"minProperties": 1, "maxProperties": 2}, doc! {"a": 1}));
    assert!(!matches(doc! {"maxProperties": 1}, doc! {"a": 1, "b": 2}));
}

#[test]
fn combines_with_other_predicates() {
    let f = Filter::parse(&doc! {"a": {"$gt": 1}, "$jsonSchema": {"required": ["b"]}}).unwrap();
    assert!(f.matches(&doc! {"a": 2, "b": 1}));
    assert!(!f.matches(&doc! {"a": 2}));
    let f = Filter::parse(&doc! {"$nor": [{"$jsonSchema": {"required": ["b"]}}]}).unwrap();
    assert!(f.matches(&doc! {"a": 2}));
}

#[test]
fn parse_errors() {
    use bson::bson;
    assert_eq!(code(bson!({"foo": 1})), ErrorCode::FailedToParse);
    assert_eq!(code(bson!({"$ref": "#/x"})), ErrorCode::FailedToParse);
    assert_eq!(code(bson!({"format": "date"})), ErrorCode::FailedToParse);
    assert_eq!(code(bson!({"dependencies": {}})), ErrorCode::NotImplemented);
    assert_eq!(code(bson!({"minimum": "x"})), ErrorCode::TypeMismatch);
    assert_eq!(code(bson!({"required": []})), ErrorCode::FailedToParse);
    assert_eq!(code(bson!({"required": ["a", "a"]})), ErrorCode::FailedToParse);
    assert_eq!(code(bson!({"minLength": -1})), ErrorCode::FailedToParse);
    assert_eq!(code(bson!({"type": "integer"})), ErrorCode::BadValue);
    assert_eq!(code(bson!({"bsonType": "nope"})), ErrorCode::BadValue);
    assert_eq!(code(bson!({"type": "object", "bsonType": "object"})), ErrorCode::FailedToParse);
    assert_eq!(code(bson!({"exclusiveMinimum": true})), ErrorCode::FailedToParse);
    assert_eq!(code(bson!({"properties": {"a": {"nope": 1}}})), ErrorCode::FailedToParse);
    assert_eq!(code(bson!(5)), ErrorCode::TypeMismatch);
    let nested = Filter::parse(&doc! {"a": {"$elemMatch": {"$jsonSchema": {}}}}).unwrap_err();
    assert_eq!(nested.code, ErrorCode::BadValue);
}
