//! The record files' JSON Schema (docs/schema/record.schema.json) as a
//! validator, shared by the record-file tests.
#![allow(dead_code)]

use std::path::Path;

use serde_json::Value;

pub(crate) fn validator() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/schema/record.schema.json");
    let text = std::fs::read_to_string(&path).expect("docs/schema/record.schema.json");
    let schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
    jsonschema::validator_for(&schema).expect("a valid JSON Schema")
}

/// Validate every line of a record file; the count of lines by type.
pub(crate) fn validate_lines(
    v: &jsonschema::Validator,
    what: &str,
    bytes: &[u8],
) -> std::collections::BTreeMap<String, usize> {
    let mut types = std::collections::BTreeMap::new();
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let value: Value = serde_json::from_slice(line)
            .unwrap_or_else(|e| panic!("{what} line {}: not JSON: {e}", i + 1));
        let errors: Vec<String> = v.iter_errors(&value).map(|e| e.to_string()).collect();
        assert!(
            errors.is_empty(),
            "{what} line {}: {errors:?}\n{}",
            i + 1,
            String::from_utf8_lossy(line)
        );
        *types
            .entry(value["type"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    types
}
