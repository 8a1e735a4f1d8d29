//! Durations written the humantime way (`90s`, `5m`, `8h`, `1h 30m`), for serde and the schema.

use std::borrow::Cow;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Serializer;

pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_duration(*d))
}

/// The duration `text` says, or why it says none.
pub fn parse(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| {
        format!("invalid duration {text:?}: {e} (write e.g. \"90s\", \"5m\", \"8h\" or \"1h 30m\")")
    })
}

/// Schema of a humantime duration.
pub(crate) struct HumanDuration;

impl JsonSchema for HumanDuration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A duration: numbers with units, e.g. `90s`, `5m`, `8h`, `1h 30m`, `500ms` (units: ns, us, ms, s, m, h, d, w, M, y and their long forms).",
            "type": "string",
            "pattern": "^\\s*([0-9]+\\s*[A-Za-zµ]+\\s*)+$",
            "examples": ["60s", "8h", "1h 30m"]
        })
    }
}

/// The same for an optional duration (read by its rule: `super::checked`).
pub mod option {
    use serde::Serializer;
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::serialize(d, s),
            None => s.serialize_none(),
        }
    }
}
