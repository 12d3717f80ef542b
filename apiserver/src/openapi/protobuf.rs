//! The Swagger 2.0 document in the protobuf form kube-apiserver also serves `/openapi/v2` in
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`): gnostic's
//! `openapi.v2.Document`. client-go's `OpenAPISchema()` asks for this form only, and kubectl up to
//! 1.28 needs it for `create -f`, `apply -f` and `explain`; a 406 sends it to a legacy path and
//! then to an error.
//!
//! Written straight from our JSON document with the field numbers of gnostic's `OpenAPIv2.proto`
//! (no generated code: the document uses a handful of messages). As gnostic does, vendor
//! extensions, defaults, examples and enum values travel as YAML text in `Any.yaml` (their JSON
//! text, which is YAML). A key the model has no field for is an error, so a document that
//! outgrows this encoder fails its unit test instead of losing fields.

use serde_json::{Map, Value};

/// Why the document could not be encoded.
pub(crate) type EncodeError = String;

type Result<T = ()> = std::result::Result<T, EncodeError>;

/// `openapi.v2.Document` for a Swagger 2.0 JSON document.
pub fn document(swagger: &Value) -> Result<Vec<u8>> {
    let mut out = Message::default();
    for (key, value) in object(swagger, "the document")? {
        match key.as_str() {
            "swagger" => out.string(1, text(value, key)?),
            "info" => out.message(2, info(value)?),
            "host" => out.string(3, text(value, key)?),
            "basePath" => out.string(4, text(value, key)?),
            "schemes" => out.strings(5, value, key)?,
            "consumes" => out.strings(6, value, key)?,
            "produces" => out.strings(7, value, key)?,
            "paths" => out.message(8, paths(value)?),
            "definitions" => out.message(9, named(value, key, schema)?),
            _ => out.extension_or(16, key, value)?,
        }
    }
    Ok(out.0)
}

fn info(value: &Value) -> Result<Message> {
    let mut out = Message::default();
    for (key, value) in object(value, "info")? {
        match key.as_str() {
            "title" => out.string(1, text(value, key)?),
            "version" => out.string(2, text(value, key)?),
            "description" => out.string(3, text(value, key)?),
            _ => out.extension_or(7, key, value)?,
        }
    }
    Ok(out)
}

/// `Paths`: extensions in field 1, `NamedPathItem`s in field 2.
fn paths(value: &Value) -> Result<Message> {
    let mut out = Message::default();
    for (key, value) in object(value, "paths")? {
        if key.starts_with("x-") {
            out.extension_or(1, key, value)?;
        } else {
            out.message(2, pair(key, path_item(value)?));
        }
    }
    Ok(out)
}

fn path_item(value: &Value) -> Result<Message> {
    let mut out = Message::default();
    for (key, value) in object(value, "a path item")? {
        match key.as_str() {
            "$ref" => out.string(1, text(value, key)?),
            "get" => out.message(2, operation(value)?),
            "put" => out.message(3, operation(value)?),
            "post" => out.message(4, operation(value)?),
            "delete" => out.message(5, operation(value)?),
            "options" => out.message(6, operation(value)?),
            "head" => out.message(7, operation(value)?),
            "patch" => out.message(8, operation(value)?),
            "parameters" => out.each(9, value, key, parameters_item)?,
            _ => out.extension_or(10, key, value)?,
        }
    }
    Ok(out)
}

fn operation(value: &Value) -> Result<Message> {
    let mut out = Message::default();
    for (key, value) in object(value, "an operation")? {
        match key.as_str() {
            "tags" => out.strings(1, value, key)?,
            "summary" => out.string(2, text(value, key)?),
            "description" => out.string(3, text(value, key)?),
            "operationId" => out.string(5, text(value, key)?),
            "produces" => out.strings(6, value, key)?,
            "consumes" => out.strings(7, value, key)?,
            "parameters" => out.each(8, value, key, parameters_item)?,
            "responses" => out.message(9, responses(value)?),
            "schemes" => out.strings(10, value, key)?,
            "deprecated" => out.boolean(11, flag(value, key)?),
            _ => out.extension_or(13, key, value)?,
        }
    }
    Ok(out)
}

/// `ParametersItem { Parameter parameter = 1 { BodyParameter = 1 | NonBodyParameter = 2 } }`.
fn parameters_item(value: &Value) -> Result<Message> {
    let location = object(value, "a parameter")?.get("in").and_then(Value::as_str).unwrap_or_default();
    let parameter = if location == "body" {
        let mut body = Message::default();
        for (key, value) in object(value, "a body parameter")? {
            match key.as_str() {
                "description" => body.string(1, text(value, key)?),
                "name" => body.string(2, text(value, key)?),
                "in" => body.string(3, text(value, key)?),
                "required" => body.boolean(4, flag(value, key)?),
                "schema" => body.message(5, schema(value)?),
                _ => body.extension_or(6, key, value)?,
            }
        }
        Message::default().with(1, body)
    } else {
        Message::default().with(2, non_body_parameter(value, location)?)
    };
    Ok(Message::default().with(1, parameter))
}

/// `NonBodyParameter`: one of four sub-schemas that differ only in that query and formData
/// parameters have `allowEmptyValue` at 5, which moves every later field up by one.
fn non_body_parameter(value: &Value, location: &str) -> Result<Message> {
    let (variant, shift) = match location {
        "header" => (1, 0),
        "formData" => (2, 1),
        "query" => (3, 1),
        "path" => (4, 0),
        other => return Err(format!("a parameter in {other:?}")),
    };
    let mut out = Message::default();
    for (key, value) in object(value, "a parameter")? {
        match key.as_str() {
            "required" => out.boolean(1, flag(value, key)?),
            "in" => out.string(2, text(value, key)?),
            "description" => out.string(3, text(value, key)?),
            "name" => out.string(4, text(value, key)?),
            "allowEmptyValue" if shift == 1 => out.boolean(5, flag(value, key)?),
            "type" => out.string(5 + shift, text(value, key)?),
            "format" => out.string(6 + shift, text(value, key)?),
            "collectionFormat" => out.string(8 + shift, text(value, key)?),
            "default" => out.message(9 + shift, any(value)),
            "pattern" => out.string(16 + shift, text(value, key)?),
            "uniqueItems" => out.boolean(19 + shift, flag(value, key)?),
            "enum" => out.each(20 + shift, value, key, |v| Ok(any(v)))?,
            _ => out.extension_or(22 + shift, key, value)?,
        }
    }
    Ok(Message::default().with(variant, out))
}

/// `Responses { repeated NamedResponseValue response_code = 1 }`, each a `ResponseValue`
/// holding a `Response` in field 1.
fn responses(value: &Value) -> Result<Message> {
    let mut out = Message::default();
    for (key, value) in object(value, "responses")? {
        if key.starts_with("x-") {
            out.extension_or(2, key, value)?;
            continue;
        }
        let mut response = Message::default();
        for (field, value) in object(value, "a response")? {
            match field.as_str() {
                "description" => response.string(1, text(value, field)?),
                // SchemaItem { Schema schema = 1 }
                "schema" => response.message(2, Message::default().with(1, schema(value)?)),
                _ => response.extension_or(5, field, value)?,
            }
        }
        out.message(1, pair(key, Message::default().with(1, response)));
    }
    Ok(out)
}

fn schema(value: &Value) -> Result<Message> {
    let mut out = Message::default();
    for (key, value) in object(value, "a schema")? {
        match key.as_str() {
            "$ref" => out.string(1, text(value, key)?),
            "format" => out.string(2, text(value, key)?),
            "title" => out.string(3, text(value, key)?),
            "description" => out.string(4, text(value, key)?),
            "default" => out.message(5, any(value)),
            "multipleOf" => out.double(6, number(value, key)?),
            "maximum" => out.double(7, number(value, key)?),
            "exclusiveMaximum" => out.boolean(8, flag(value, key)?),
            "minimum" => out.double(9, number(value, key)?),
            "exclusiveMinimum" => out.boolean(10, flag(value, key)?),
            "maxLength" => out.int64(11, integer(value, key)?),
            "minLength" => out.int64(12, integer(value, key)?),
            "pattern" => out.string(13, text(value, key)?),
            "maxItems" => out.int64(14, integer(value, key)?),
            "minItems" => out.int64(15, integer(value, key)?),
            "uniqueItems" => out.boolean(16, flag(value, key)?),
            "maxProperties" => out.int64(17, integer(value, key)?),
            "minProperties" => out.int64(18, integer(value, key)?),
            "required" => out.strings(19, value, key)?,
            "enum" => out.each(20, value, key, |v| Ok(any(v)))?,
            // AdditionalPropertiesItem { Schema schema = 1 | bool boolean = 2 }
            "additionalProperties" => out.message(
                21,
                match value {
                    Value::Bool(allowed) => Message::default().with_bool(2, *allowed),
                    other => Message::default().with(1, schema(other)?),
                },
            ),
            // TypeItem { repeated string value = 1 }
            "type" => out.message(22, {
                let mut types = Message::default();
                match value {
                    Value::Array(_) => types.strings(1, value, key)?,
                    other => types.string(1, text(other, key)?),
                }
                types
            }),
            // ItemsItem { repeated Schema schema = 1 }
            "items" => out.message(23, {
                let mut items = Message::default();
                match value {
                    Value::Array(_) => items.each(1, value, key, schema)?,
                    other => items.message(1, schema(other)?),
                }
                items
            }),
            "allOf" => out.each(24, value, key, schema)?,
            "properties" => out.message(25, named(value, key, schema)?),
            "discriminator" => out.string(26, text(value, key)?),
            "readOnly" => out.boolean(27, flag(value, key)?),
            "example" => out.message(30, any(value)),
            _ => out.extension_or(31, key, value)?,
        }
    }
    Ok(out)
}

/// A map of schemas (`Definitions`, `Properties`): `repeated NamedSchema additional_properties = 1`.
fn named(value: &Value, what: &str, encode: fn(&Value) -> Result<Message>) -> Result<Message> {
    let mut out = Message::default();
    for (name, value) in object(value, what)? {
        out.message(1, pair(name, encode(value)?));
    }
    Ok(out)
}

/// `Named*` messages: `string name = 1`, the value in field 2.
fn pair(name: &str, value: Message) -> Message {
    let mut out = Message::default();
    out.string(1, name);
    out.message(2, value);
    out
}

/// `Any { string yaml = 2 }` holding the value's JSON text.
fn any(value: &Value) -> Message {
    let mut out = Message::default();
    out.string(2, &value.to_string());
    out
}

fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>> {
    value.as_object().ok_or_else(|| format!("{what} is not an object: {value}"))
}

fn text<'a>(value: &'a Value, key: &str) -> Result<&'a str> {
    value.as_str().ok_or_else(|| format!("{key} is not a string: {value}"))
}

fn flag(value: &Value, key: &str) -> Result<bool> {
    value.as_bool().ok_or_else(|| format!("{key} is not a boolean: {value}"))
}

fn number(value: &Value, key: &str) -> Result<f64> {
    value.as_f64().ok_or_else(|| format!("{key} is not a number: {value}"))
}

fn integer(value: &Value, key: &str) -> Result<i64> {
    value.as_i64().ok_or_else(|| format!("{key} is not an integer: {value}"))
}

/// One protobuf message being written: fields in the order given, proto3 defaults (empty
/// strings, false, zero) left out, sub-messages always written (their presence matters).
#[derive(Debug, Default)]
struct Message(Vec<u8>);

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LENGTH_DELIMITED: u32 = 2;

impl Message {
    fn with(mut self, field: u32, value: Message) -> Self {
        self.message(field, value);
        self
    }

    fn with_bool(mut self, field: u32, value: bool) -> Self {
        self.boolean(field, value);
        self
    }

    fn key(&mut self, field: u32, wire_type: u32) {
        self.varint(u64::from((field << 3) | wire_type));
    }

    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.0.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.key(field, LENGTH_DELIMITED);
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    fn string(&mut self, field: u32, value: &str) {
        if !value.is_empty() {
            self.bytes(field, value.as_bytes());
        }
    }

    fn boolean(&mut self, field: u32, value: bool) {
        if value {
            self.key(field, VARINT);
            self.varint(1);
        }
    }

    fn int64(&mut self, field: u32, value: i64) {
        if value != 0 {
            self.key(field, VARINT);
            // Negative int64s are ten-byte varints of their two's complement.
            self.varint(value as u64);
        }
    }

    fn double(&mut self, field: u32, value: f64) {
        if value != 0.0 {
            self.key(field, FIXED64);
            self.0.extend_from_slice(&value.to_le_bytes());
        }
    }

    fn message(&mut self, field: u32, value: Message) {
        self.bytes(field, &value.0);
    }

    /// A repeated string field from a JSON array of strings.
    fn strings(&mut self, field: u32, value: &Value, key: &str) -> Result {
        for item in value.as_array().ok_or_else(|| format!("{key} is not an array: {value}"))? {
            self.bytes(field, text(item, key)?.as_bytes());
        }
        Ok(())
    }

    /// A repeated message field, one message per item of a JSON array.
    fn each(&mut self, field: u32, value: &Value, key: &str, encode: impl Fn(&Value) -> Result<Message>) -> Result {
        for item in value.as_array().ok_or_else(|| format!("{key} is not an array: {value}"))? {
            self.message(field, encode(item)?);
        }
        Ok(())
    }

    /// A vendor extension (`x-…`) as a `NamedAny` in `field`; any other key has no place in
    /// the message and is an error.
    fn extension_or(&mut self, field: u32, key: &str, value: &Value) -> Result {
        if !key.starts_with("x-") {
            return Err(format!("{key:?} has no field in the protobuf form"));
        }
        self.message(field, pair(key, any(value)));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// One decoded field: number and either a varint, a fixed64 or the bytes.
    #[derive(Debug, PartialEq)]
    enum Field<'a> {
        Varint(u64),
        Fixed64(f64),
        Bytes(&'a [u8]),
    }

    /// A minimal protobuf reader, enough to check what the encoder wrote.
    fn fields(mut bytes: &[u8]) -> Vec<(u32, Field<'_>)> {
        fn varint(bytes: &mut &[u8]) -> u64 {
            let (mut value, mut shift) = (0u64, 0);
            loop {
                let byte = bytes[0];
                *bytes = &bytes[1..];
                value |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return value;
                }
                shift += 7;
            }
        }
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let key = varint(&mut bytes);
            let field = (key >> 3) as u32;
            match (key & 7) as u32 {
                VARINT => out.push((field, Field::Varint(varint(&mut bytes)))),
                FIXED64 => {
                    let (value, rest) = bytes.split_at(8);
                    out.push((field, Field::Fixed64(f64::from_le_bytes(value.try_into().unwrap()))));
                    bytes = rest;
                }
                LENGTH_DELIMITED => {
                    let length = varint(&mut bytes) as usize;
                    let (value, rest) = bytes.split_at(length);
                    out.push((field, Field::Bytes(value)));
                    bytes = rest;
                }
                other => panic!("wire type {other}"),
            }
        }
        out
    }

    fn bytes_of<'a>(fields: &[(u32, Field<'a>)], number: u32) -> Vec<&'a [u8]> {
        fields
            .iter()
            .filter(|(n, _)| *n == number)
            .map(|(_, f)| match f {
                Field::Bytes(b) => *b,
                other => panic!("field {number} is {other:?}"),
            })
            .collect()
    }

    fn string_of(fields: &[(u32, Field<'_>)], number: u32) -> String {
        String::from_utf8(bytes_of(fields, number).concat()).unwrap()
    }

    #[test]
    fn a_document_encodes_with_gnostic_field_numbers() {
        let swagger = json!({
            "swagger": "2.0",
            "info": {"title": "t", "version": "v1"},
            "paths": {"/a/{name}": {
                "parameters": [{"name": "name", "in": "path", "required": true, "type": "string"}],
                "patch": {
                    "operationId": "patchA",
                    "parameters": [
                        {"name": "body", "in": "body", "required": true, "schema": {"$ref": "#/definitions/A"}},
                        {"name": "fieldValidation", "in": "query", "type": "string", "uniqueItems": true},
                    ],
                    "responses": {"200": {"description": "OK", "schema": {"$ref": "#/definitions/A"}}},
                    "x-kubernetes-group-version-kind": {"group": "g", "version": "v", "kind": "A"},
                },
            }},
            "definitions": {"A": {
                "type": "object",
                "required": ["zones"],
                "properties": {
                    "zones": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                    "free": {"type": "string", "format": "int-or-string", "minimum": 1.5},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                },
                "x-kubernetes-group-version-kind": [{"group": "g", "version": "v", "kind": "A"}],
            }},
        });
        let encoded = document(&swagger).unwrap();
        let top = fields(&encoded);
        assert_eq!(string_of(&top, 1), "2.0");
        let info = fields(bytes_of(&top, 2)[0]);
        assert_eq!((string_of(&info, 1), string_of(&info, 2)), ("t".to_owned(), "v1".to_owned()));

        // Paths → NamedPathItem (2) → PathItem: shared parameters (9), patch (8).
        let paths = fields(bytes_of(&top, 8)[0]);
        let named = fields(bytes_of(&paths, 2)[0]);
        assert_eq!(string_of(&named, 1), "/a/{name}");
        let item = fields(bytes_of(&named, 2)[0]);
        let path_parameter = fields(bytes_of(&item, 9)[0]); // ParametersItem
        let non_body = fields(bytes_of(&fields(bytes_of(&path_parameter, 1)[0]), 2)[0]);
        let path_sub_schema = fields(bytes_of(&non_body, 4)[0]);
        assert!(path_sub_schema.contains(&(1, Field::Varint(1))), "required");
        assert_eq!(string_of(&path_sub_schema, 5), "string", "type is field 5 of a path parameter");

        let patch = fields(bytes_of(&item, 8)[0]);
        assert_eq!(string_of(&patch, 5), "patchA");
        let [body, query] = bytes_of(&patch, 8)[..] else { panic!("two parameters") };
        let body = fields(bytes_of(&fields(bytes_of(&fields(body), 1)[0]), 1)[0]);
        assert_eq!(string_of(&body, 3), "body");
        assert_eq!(string_of(&fields(bytes_of(&body, 5)[0]), 1), "#/definitions/A");
        let query = fields(bytes_of(&fields(bytes_of(&fields(query), 1)[0]), 2)[0]);
        let query = fields(bytes_of(&query, 3)[0]);
        assert_eq!(string_of(&query, 4), "fieldValidation");
        assert_eq!(string_of(&query, 6), "string", "type is field 6 of a query parameter");
        assert!(query.contains(&(20, Field::Varint(1))), "uniqueItems");
        let responses = fields(bytes_of(&patch, 9)[0]);
        let ok = fields(bytes_of(&responses, 1)[0]);
        assert_eq!(string_of(&ok, 1), "200");
        let response = fields(bytes_of(&fields(bytes_of(&ok, 2)[0]), 1)[0]);
        assert_eq!(string_of(&response, 1), "OK");
        let extension = fields(bytes_of(&patch, 13)[0]);
        assert_eq!(string_of(&extension, 1), "x-kubernetes-group-version-kind");
        let yaml = string_of(&fields(bytes_of(&extension, 2)[0]), 2);
        assert_eq!(serde_json::from_str::<Value>(&yaml).unwrap()["kind"], "A");

        // Definitions → NamedSchema → Schema.
        let definitions = fields(bytes_of(&top, 9)[0]);
        let a = fields(bytes_of(&definitions, 1)[0]);
        assert_eq!(string_of(&a, 1), "A");
        let a = fields(bytes_of(&a, 2)[0]);
        assert_eq!(string_of(&fields(bytes_of(&a, 22)[0]), 1), "object");
        assert_eq!(string_of(&a, 19), "zones");
        let properties = fields(bytes_of(&a, 25)[0]);
        let names: Vec<String> = bytes_of(&properties, 1).iter().map(|p| string_of(&fields(p), 1)).collect();
        assert_eq!(names.len(), 3);
        let property = |name: &str| {
            let named = bytes_of(&properties, 1).into_iter().find(|p| string_of(&fields(p), 1) == name).unwrap();
            fields(bytes_of(&fields(named), 2)[0])
        };
        let zones = property("zones");
        let item = fields(bytes_of(&fields(bytes_of(&zones, 23)[0]), 1)[0]); // ItemsItem → Schema
        assert_eq!(string_of(&fields(bytes_of(&item, 22)[0]), 1), "string");
        assert!(zones.contains(&(14, Field::Varint(3))), "maxItems");
        let free = property("free");
        assert_eq!(string_of(&free, 2), "int-or-string");
        assert!(free.contains(&(9, Field::Fixed64(1.5))), "minimum");
        let labels = property("labels");
        let additional = fields(bytes_of(&labels, 21)[0]);
        assert_eq!(bytes_of(&additional, 1).len(), 1, "additionalProperties holds a schema");
        assert_eq!(bytes_of(&a, 31).len(), 1, "the kind's group-version-kind extension");
    }

    #[test]
    fn a_key_without_a_protobuf_field_is_an_error_not_a_silent_loss() {
        let error = document(&json!({"swagger": "2.0", "definitions": {"A": {"nullable": true}}})).unwrap_err();
        assert!(error.contains("nullable"), "{error}");
        assert!(
            document(&json!({"swagger": "2.0", "paths": {"/a": {"get": {"parameters": [{"in": "cookie"}]}}}})).is_err()
        );
    }
}
