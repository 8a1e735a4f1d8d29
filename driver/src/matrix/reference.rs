//! The matrix reference (`docs/matrix-reference.md`), generated from the JSON schema that the
//! matrix types generate: every field of every type with its type, whether it is required, its
//! default and its doc comment. A test keeps the committed page equal to it.

use serde_json::Value;
use std::fmt::Write as _;

/// The reference page as Markdown.
pub fn reference_markdown() -> String {
    let schema = super::json_schema();
    let defs = schema["$defs"].as_object().cloned().unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Matrix reference\n\n\
         Every field of the test matrix (YAML, version 1), generated from the matrix types \
         (`driver/src/matrix/types.rs`) through their JSON schema, \
         [test-matrices/schema.json](../test-matrices/schema.json). Regenerate both with \
         `UPDATE_SCHEMA=1 cargo test -p driver schema`. How a matrix is read and run: \
         [matrix.md](matrix.md).\n"
    );
    section(&mut out, "Matrix", &schema);
    for (name, def) in &defs {
        section(&mut out, name, def);
    }
    out
}

/// One type: its description and, for an object, a row per field; for an enum, its values.
fn section(out: &mut String, name: &str, def: &Value) {
    let _ = writeln!(out, "## {name}\n");
    if let Some(d) = def["description"].as_str() {
        let _ = writeln!(out, "{}\n", one_paragraph(d));
    }
    if let Some(props) = def["properties"].as_object() {
        let required: Vec<&str> = def["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let _ = writeln!(out, "| field | type | required | default | description |");
        let _ = writeln!(out, "|---|---|---|---|---|");
        for (field, p) in props {
            let default = p
                .get("default")
                .map(|d| format!("`{d}`"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "| `{field}` | {} | {} | {} | {} |",
                type_of(p),
                if required.contains(&field.as_str()) {
                    "yes"
                } else {
                    ""
                },
                cell(&default),
                cell(&one_paragraph(
                    p["description"].as_str().unwrap_or_default()
                ))
            );
        }
        out.push('\n');
    } else {
        let alternatives = def["oneOf"]
            .as_array()
            .or_else(|| def["anyOf"].as_array())
            .cloned()
            .unwrap_or_default();
        let values: Vec<String> = def["enum"]
            .as_array()
            .map(|e| e.iter().map(|v| format!("`{v}`")).collect())
            .unwrap_or_default();
        if !values.is_empty() {
            let _ = writeln!(out, "One of: {}.\n", values.join(", "));
        } else if !alternatives.is_empty() {
            for a in &alternatives {
                let mut what = a
                    .get("const")
                    .map(|c| format!("`{c}`"))
                    .unwrap_or_else(|| type_of(a));
                let mut why = one_paragraph(a["description"].as_str().unwrap_or_default());
                // An alternative that is an object is named by its fields (e.g. `binary` or
                // `image`), each with its type and, when the alternative says nothing, its words.
                if let Some(props) = a["properties"].as_object() {
                    let fields: Vec<String> = props
                        .iter()
                        .map(|(f, p)| format!("`{f}` ({})", type_of(p)))
                        .collect();
                    what = format!("an object with {}", fields.join(", "));
                    if why.is_empty() {
                        why = props
                            .values()
                            .filter_map(|p| p["description"].as_str())
                            .map(one_paragraph)
                            .collect::<Vec<_>>()
                            .join(" ");
                    }
                }
                let _ = writeln!(
                    out,
                    "- {what}{}",
                    if why.is_empty() {
                        String::new()
                    } else {
                        format!(": {why}")
                    }
                );
            }
            out.push('\n');
        } else {
            let _ = writeln!(out, "Type: {}.\n", type_of(def));
        }
    }
}

/// A field's type in words, with links to the types it refers to.
fn type_of(p: &Value) -> String {
    if let Some(r) = p["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap_or(r);
        return format!("[{name}](#{})", name.to_ascii_lowercase());
    }
    if let Some(all) = p["allOf"].as_array()
        && let Some(first) = all.first()
    {
        return type_of(first);
    }
    if let Some(any) = p["anyOf"].as_array().or_else(|| p["oneOf"].as_array()) {
        return any
            .iter()
            .map(type_of)
            .filter(|t| t != "null")
            .collect::<Vec<_>>()
            .join(" or ");
    }
    let kind = match &p["type"] {
        Value::String(t) => t.clone(),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect::<Vec<_>>()
            .join(" or "),
        _ => String::new(),
    };
    match kind.as_str() {
        "array" => format!("list of {}", type_of(&p["items"])),
        "object" if p["additionalProperties"].is_object() => {
            format!("map of {}", type_of(&p["additionalProperties"]))
        }
        "" if p.get("const").is_some() => format!("`{}`", p["const"]),
        "" => "any".into(),
        other => other.into(),
    }
}

/// A description on one line (the doc comments wrap).
fn one_paragraph(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A table cell: `|` escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}
