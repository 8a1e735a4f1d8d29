//! A model's `config.pbtxt`: Triton's `inference.ModelConfig` in protobuf text format, read and
//! written with prost-reflect over the descriptors of the shared proto crate (never by string
//! edits). A sweep's `models.NAME.FIELD` parameters are [`ConfigPath`]s into it.
//!
//! Written text is prost-reflect's (pretty, fields in their declared order): comments of the
//! original do not survive, and diffs compare [`normalized`] text on both sides.

use prost::Message as _;
use prost_reflect::text_format::FormatOptions;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, Value,
};
use std::sync::OnceLock;

/// The name of the message a `config.pbtxt` holds.
pub const MODEL_CONFIG_MESSAGE: &str = "inference.ModelConfig";

/// `inference.ModelConfig`'s descriptor.
pub fn descriptor() -> MessageDescriptor {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(triton_proto::FILE_DESCRIPTOR_SET)
            .expect("the proto crate's descriptors decode")
    })
    .get_message_by_name(MODEL_CONFIG_MESSAGE)
    .expect("model_config.proto defines inference.ModelConfig")
}

/// Why a model config, a path into one or a value for it is refused; each says what is wrong
/// in words a matrix's author can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The text is not `inference.ModelConfig` in protobuf text format.
    #[error("{0}")]
    Text(String),
    /// A path names no field of `inference.ModelConfig`, or subscripts one wrongly.
    #[error("{0}")]
    Path(String),
    /// A value does not fit the field at its path, or the config has no such entry.
    #[error("{0}")]
    Value(String),
}

/// Parses a `config.pbtxt`'s text.
pub fn parse(text: &str) -> Result<DynamicMessage, ConfigError> {
    DynamicMessage::parse_text_format(descriptor(), &with_list_colons(text))
        .map_err(|e| ConfigError::Text(e.to_string()))
}

/// `text` with a `:` between a field name and a `[` that directly follows it.
///
/// The text format lets a list of messages follow its field's name without a colon
/// (`MessageField = FieldName, [ ":" ], ( MessageValue | MessageList )`), and Triton's configs
/// are written that way (`input [ { ... } ]`), but prost-reflect 0.16 accepts an omitted colon
/// only before `{` or `<`. A token-level pass (strings and comments skipped) adds it; nothing
/// else of the text changes.
fn with_list_colons(text: &str) -> String {
    #[derive(Clone, Copy, PartialEq)]
    enum Token {
        None,
        Colon,
        /// An identifier, and whether a `:` came right before it (then it is a value).
        Ident {
            after_colon: bool,
        },
        Other,
    }
    let mut out = String::with_capacity(text.len() + 16);
    let (mut last, mut chars) = (Token::None, text.char_indices().peekable());
    while let Some((_, c)) = chars.next() {
        match c {
            '#' => {
                out.push(c);
                for (_, c) in chars.by_ref() {
                    out.push(c);
                    if c == '\n' {
                        break;
                    }
                }
            }
            '"' | '\'' => {
                out.push(c);
                while let Some((_, d)) = chars.next() {
                    out.push(d);
                    if d == '\\' {
                        if let Some((_, e)) = chars.next() {
                            out.push(e);
                        }
                    } else if d == c {
                        break;
                    }
                }
                last = Token::Other;
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                out.push(c);
                while let Some(&(_, d)) = chars.peek() {
                    if !(d.is_ascii_alphanumeric() || d == '_') {
                        break;
                    }
                    out.push(d);
                    chars.next();
                }
                last = Token::Ident {
                    after_colon: last == Token::Colon,
                };
            }
            c if c.is_whitespace() => out.push(c),
            ':' => {
                out.push(c);
                last = Token::Colon;
            }
            '[' => {
                if last == (Token::Ident { after_colon: false }) {
                    out.push(':');
                }
                out.push(c);
                last = Token::Other;
            }
            _ => {
                out.push(c);
                // A number's letters (1e3, 0x1F, inf) stay part of it.
                if c.is_ascii_digit() || c == '-' || c == '.' {
                    while let Some(&(_, d)) = chars.peek() {
                        if !(d.is_ascii_alphanumeric() || d == '.' || d == '+' || d == '-') {
                            break;
                        }
                        out.push(d);
                        chars.next();
                    }
                }
                last = Token::Other;
            }
        }
    }
    out
}

/// The text of a model config as written: pretty, one field per line, in declared order, map
/// entries (`parameters`) by key.
pub fn to_text(config: &DynamicMessage) -> String {
    // prost-reflect keeps a map in a HashMap and prints it in that order, which differs from
    // one parse to the next. The same bytes read as ModelConfig without map fields (a map is a
    // repeated entry message on the wire) hold each map as a list, which sorts; the text of
    // such a list is also how a map is written, so it reads back as the map.
    let plain = list_maps_descriptor()
        .get_message_by_name(MODEL_CONFIG_MESSAGE)
        .expect("the same protos");
    let mut text = match DynamicMessage::decode(plain, config.encode_to_vec().as_slice()) {
        Ok(mut listed) => {
            sort_entries(&mut listed);
            listed.to_text_format_with_options(&FormatOptions::new().pretty(true))
        }
        Err(_) => config.to_text_format_with_options(&FormatOptions::new().pretty(true)),
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// The protos' descriptors with every map entry message made a plain message.
fn list_maps_descriptor() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        fn plain(m: &mut prost_types::DescriptorProto) {
            if let Some(options) = &mut m.options {
                options.map_entry = None;
            }
            m.nested_type.iter_mut().for_each(plain);
        }
        let mut set = prost_types::FileDescriptorSet::decode(triton_proto::FILE_DESCRIPTOR_SET)
            .expect("the proto crate's descriptors decode");
        for file in &mut set.file {
            file.message_type.iter_mut().for_each(plain);
        }
        DescriptorPool::from_file_descriptor_set(set).expect("the same protos, without maps")
    })
}

/// Sorts every list of (former) map entries by key, at every depth.
fn sort_entries(message: &mut DynamicMessage) {
    let map_entry = |m: &MessageDescriptor| {
        descriptor()
            .parent_pool()
            .get_message_by_name(m.full_name())
            .is_some_and(|original| original.is_map_entry())
    };
    for (field, value) in message.fields_mut() {
        match value {
            Value::Message(inner) => sort_entries(inner),
            Value::List(items) => {
                for item in items.iter_mut() {
                    if let Value::Message(inner) = item {
                        sort_entries(inner);
                    }
                }
                if let Kind::Message(entry) = field.kind()
                    && map_entry(&entry)
                {
                    let key = |v: &Value| {
                        v.as_message()
                            .and_then(|m| m.get_field_by_number(1))
                            .map(|k| format!("{k:?}"))
                            .unwrap_or_default()
                    };
                    items.sort_by_key(key);
                }
            }
            _ => {}
        }
    }
}

/// A `config.pbtxt`'s text normalized (parsed and written again): two configs that mean the
/// same have the same normalized text, whatever their comments, spacing or field order.
pub fn normalized(text: &str) -> Result<String, ConfigError> {
    parse(text).map(|c| to_text(&c))
}

/// The value field of a map field's entries.
fn map_value(field: &FieldDescriptor) -> FieldDescriptor {
    match field.kind() {
        Kind::Message(entry) => entry.map_entry_value_field(),
        _ => unreachable!("a map field's entries are messages"),
    }
}

/// One step of a [`ConfigPath`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(FieldDescriptor),
    /// An entry of a repeated field.
    Index(usize),
    /// An entry of a map field (Triton's maps are keyed by strings).
    Key(String),
}

/// A path into a model config, e.g. `max_batch_size`, `instance_group[0].count`,
/// `dynamic_batching.max_queue_delay_microseconds`, `parameters[execute_delay_ms].string_value`,
/// resolved against `inference.ModelConfig`: every field exists, `[i]` follows a repeated field
/// and `[KEY]` a map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigPath {
    text: String,
    steps: Vec<Step>,
}

impl std::fmt::Display for ConfigPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// `text`'s parts between the dots outside `[...]` (a map key may hold dots).
fn split_outside_brackets(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut from) = (Vec::new(), 0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            '.' if depth == 0 => {
                parts.push(&text[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[from..]);
    parts
}

fn field_names(message: &MessageDescriptor) -> String {
    message
        .fields()
        .map(|f| f.name().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl ConfigPath {
    /// Parses and resolves `text`; the error says which part is wrong and what would be right.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        Self::resolve(text).map_err(ConfigError::Path)
    }

    fn resolve(text: &str) -> Result<Self, String> {
        let mut steps = Vec::new();
        let mut message = Some(descriptor());
        // A list or map named without a subscript, which nothing can follow.
        let mut unsubscripted: Option<String> = None;
        for part in split_outside_brackets(text) {
            let (name, mut brackets) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            let Some(within) = message.take() else {
                return Err(match &unsubscripted {
                    Some(list) => {
                        format!("`{text}`: `{list}` is a list: name an entry, `{list}[0].{name}`")
                    }
                    None => format!("`{text}`: `{name}` follows a field that is not a message"),
                });
            };
            if name.is_empty() {
                return Err(format!("`{text}`: an empty field name"));
            }
            let field = within.get_field_by_name(name).ok_or_else(|| {
                format!(
                    "`{text}`: {} has no field `{name}` (its fields: {})",
                    within.name(),
                    field_names(&within)
                )
            })?;
            let mut element_kind = if field.is_map() {
                None
            } else {
                Some(field.kind())
            };
            steps.push(Step::Field(field.clone()));
            let mut subscripted = false;
            while let Some(rest) = brackets.strip_prefix('[') {
                let (inside, after) = rest
                    .split_once(']')
                    .ok_or_else(|| format!("`{text}`: `[` without `]`"))?;
                if subscripted {
                    return Err(format!("`{text}`: `{name}` takes one subscript"));
                }
                subscripted = true;
                if field.is_list() {
                    let index = inside.parse::<usize>().map_err(|_| {
                        format!("`{text}`: `{name}` is a list: its subscript is an index from 0, not `{inside}`")
                    })?;
                    steps.push(Step::Index(index));
                } else if field.is_map() {
                    let key = inside.trim_matches('"');
                    if key.is_empty() {
                        return Err(format!(
                            "`{text}`: `{name}` is a map: name a key, `{name}[KEY]`"
                        ));
                    }
                    steps.push(Step::Key(key.to_string()));
                    element_kind = Some(map_value(&field).kind());
                } else {
                    return Err(format!(
                        "`{text}`: `{name}` is neither a list nor a map: it takes no subscript"
                    ));
                }
                brackets = after;
            }
            if !brackets.is_empty() {
                return Err(format!("`{text}`: `{brackets}` after `{name}`"));
            }
            if (field.is_map() || field.is_list()) && !subscripted {
                // A whole list is set at once (a whole map is not a value a sweep sets, its
                // entries are): nothing goes below it.
                element_kind = None;
                unsubscripted = Some(name.to_string());
            }
            if let Some(Kind::Message(m)) = element_kind {
                message = Some(m);
            }
        }
        let path = ConfigPath {
            text: text.to_string(),
            steps,
        };
        if let Some(Step::Field(f)) = path.steps.last()
            && f.is_map()
        {
            return Err(format!(
                "`{text}`: `{}` is a map: name an entry, `{}[KEY]`",
                f.name(),
                f.name()
            ));
        }
        Ok(path)
    }

    /// The config value `value` (a matrix value: YAML read as JSON) makes at this path, or why it
    /// is of the wrong type for the field.
    pub fn value_of(&self, value: &serde_json::Value) -> Result<Option<Value>, ConfigError> {
        self.converted(value).map_err(ConfigError::Value)
    }

    fn converted(&self, value: &serde_json::Value) -> Result<Option<Value>, String> {
        let (field, whole_list) = self.leaf();
        if value.is_null() {
            return if self.steps.len() == 1 {
                // Clearing a top-level field (e.g. dynamic_batching) is a variant too.
                Ok(None)
            } else {
                Err(format!("`{self}`: null clears top-level fields only"))
            };
        }
        let kind = if matches!(self.steps.last(), Some(Step::Key(_))) {
            map_value(&field).kind()
        } else {
            field.kind()
        };
        if whole_list {
            let items = value.as_array().ok_or_else(|| {
                format!(
                    "`{self}` is a list: its value is a list (or name an entry, `{}[0]`)",
                    field.name()
                )
            })?;
            let converted: Result<Vec<Value>, String> =
                items.iter().map(|v| convert(&kind, v, self)).collect();
            return Ok(Some(Value::List(converted?)));
        }
        convert(&kind, value, self).map(Some)
    }

    /// The last field and whether the path sets the whole of a repeated field.
    fn leaf(&self) -> (FieldDescriptor, bool) {
        let (index, field) = self
            .steps
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, s)| match s {
                Step::Field(f) => Some((i, f.clone())),
                _ => None,
            })
            .expect("a path has a field");
        let whole_list = field.is_list() && index == self.steps.len() - 1;
        (field, whole_list)
    }

    /// Sets this path of `config` to `value` (checked by [`ConfigPath::value_of`]); a message on
    /// the way is created when absent, a list entry must exist.
    pub fn set(
        &self,
        config: &mut DynamicMessage,
        value: &serde_json::Value,
    ) -> Result<(), ConfigError> {
        let converted = self.value_of(value)?;
        set_in(config, &self.steps, converted, self).map_err(ConfigError::Value)
    }
}

fn set_in(
    message: &mut DynamicMessage,
    steps: &[Step],
    value: Option<Value>,
    path: &ConfigPath,
) -> Result<(), String> {
    let Some(Step::Field(field)) = steps.first() else {
        unreachable!("a path's steps start with a field and a subscript is followed by one");
    };
    match steps.get(1) {
        Some(Step::Index(i)) => {
            let rest = &steps[2..];
            let list = message
                .get_field_mut(field)
                .as_list_mut()
                .expect("an index follows a repeated field");
            let len = list.len();
            let entry = list.get_mut(*i).ok_or_else(|| {
                format!(
                    "`{path}`: the config's `{}` has {len} entr{} (index {i} is past the end)",
                    field.name(),
                    if len == 1 { "y" } else { "ies" }
                )
            })?;
            match (rest.is_empty(), value) {
                (true, Some(v)) => {
                    *entry = v;
                    Ok(())
                }
                (true, None) => Err(format!("`{path}`: null clears top-level fields only")),
                (false, v) => set_in(
                    entry
                        .as_message_mut()
                        .expect("a field follows a message entry"),
                    rest,
                    v,
                    path,
                ),
            }
        }
        Some(Step::Key(key)) => {
            let rest = &steps[2..];
            let value_field = map_value(field);
            let map = message
                .get_field_mut(field)
                .as_map_mut()
                .expect("a key follows a map field");
            let key = MapKey::String(key.clone());
            match (rest.is_empty(), value) {
                (true, Some(v)) => {
                    map.insert(key, v);
                    Ok(())
                }
                (true, None) => Err(format!("`{path}`: null clears top-level fields only")),
                (false, v) => {
                    let Kind::Message(entry_type) = value_field.kind() else {
                        unreachable!("a field follows a map of messages");
                    };
                    let entry = map
                        .entry(key)
                        .or_insert_with(|| Value::Message(DynamicMessage::new(entry_type)));
                    set_in(
                        entry.as_message_mut().expect("a map of messages"),
                        rest,
                        v,
                        path,
                    )
                }
            }
        }
        _ => {
            let rest = &steps[1..];
            if rest.is_empty() {
                match value {
                    Some(v) => message.set_field(field, v),
                    None => message.clear_field(field),
                }
                Ok(())
            } else {
                set_in(
                    message
                        .get_field_mut(field)
                        .as_message_mut()
                        .expect("a field follows a message"),
                    rest,
                    value,
                    path,
                )
            }
        }
    }
}

/// A matrix value as a config value of `kind`.
fn convert(kind: &Kind, value: &serde_json::Value, path: &ConfigPath) -> Result<Value, String> {
    use serde_json::Value as J;
    let wrong = |expected: &str| {
        let hint = if expected == "a string" && !value.is_object() && !value.is_array() {
            format!(" (quote it: \"{value}\")")
        } else {
            String::new()
        };
        Err(format!("`{path}` takes {expected}, found {value}{hint}"))
    };
    let wide = matches!(
        kind,
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 | Kind::Uint64 | Kind::Fixed64
    );
    let int = |min: i128, max: i128| -> Result<i128, String> {
        let n = match value {
            J::Number(n) => n.as_i64().map(i128::from).or(n.as_u64().map(i128::from)),
            // Protobuf's JSON writes 64-bit integers as strings.
            J::String(s) if wide => s.parse::<i128>().ok(),
            _ => None,
        };
        match n {
            Some(n) if (min..=max).contains(&n) => Ok(n),
            Some(n) => Err(format!(
                "`{path}` takes an integer from {min} to {max}, found {n}"
            )),
            None => Err(format!("`{path}` takes an integer, found {value}")),
        }
    };
    Ok(match kind {
        Kind::Bool => match value {
            J::Bool(b) => Value::Bool(*b),
            _ => return wrong("true or false"),
        },
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            Value::I32(int(i32::MIN.into(), i32::MAX.into())? as i32)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            Value::I64(int(i64::MIN.into(), i64::MAX.into())? as i64)
        }
        Kind::Uint32 | Kind::Fixed32 => Value::U32(int(0, u32::MAX.into())? as u32),
        Kind::Uint64 | Kind::Fixed64 => Value::U64(int(0, u64::MAX.into())? as u64),
        Kind::Float | Kind::Double => match value.as_f64() {
            Some(f) if matches!(kind, Kind::Float) => Value::F32(f as f32),
            Some(f) => Value::F64(f),
            None => return wrong("a number"),
        },
        Kind::String => match value {
            J::String(s) => Value::String(s.clone()),
            _ => return wrong("a string"),
        },
        Kind::Bytes => match value {
            J::String(s) => Value::Bytes(s.clone().into_bytes().into()),
            _ => return wrong("a string"),
        },
        Kind::Enum(e) => {
            let found = match value {
                J::String(s) => e.get_value_by_name(s),
                J::Number(n) => n
                    .as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .and_then(|n| e.get_value(n)),
                _ => None,
            };
            match found {
                Some(v) => Value::EnumNumber(v.number()),
                None => {
                    let names: Vec<String> = e.values().map(|v| v.name().to_string()).collect();
                    return Err(format!(
                        "`{path}` takes one of {}, found {value}",
                        names.join(", ")
                    ));
                }
            }
        }
        Kind::Message(m) => match value {
            // A message as a mapping, in protobuf's JSON form (field names as in the .proto).
            J::Object(_) => Value::Message(
                DynamicMessage::deserialize(m.clone(), value.clone())
                    .map_err(|e| format!("`{path}`: {e}"))?,
            ),
            // Or in text format, as config.pbtxt writes it.
            J::String(s) => Value::Message(
                DynamicMessage::parse_text_format(m.clone(), s)
                    .map_err(|e| format!("`{path}`: {e}"))?,
            ),
            _ => return wrong(&format!("a mapping (a {} message)", m.name())),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FIXED_CAPACITY: &str = r#"
# A comment that does not survive.
name: "fixed_capacity"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]
parameters: { key: "execute_delay_ms" value: { string_value: "50" } }
instance_group [ { count: 2 kind: KIND_CPU } ]
"#;

    fn set(text: &str, path: &str, value: serde_json::Value) -> Result<String, ConfigError> {
        let mut config = parse(text)?;
        ConfigPath::parse(path)?.set(&mut config, &value)?;
        Ok(to_text(&config))
    }

    fn field<'a>(config: &'a DynamicMessage, name: &str) -> std::borrow::Cow<'a, Value> {
        config
            .get_field_by_name(name)
            .expect("a field of ModelConfig")
    }

    #[test]
    fn a_set_value_is_read_back_and_nothing_else_changes() {
        let written = set(FIXED_CAPACITY, "instance_group[0].count", json!(4)).unwrap();
        let config = parse(&written).unwrap();
        let groups = field(&config, "instance_group");
        let group = groups.as_list().unwrap()[0].as_message().unwrap();
        assert_eq!(*group.get_field_by_name("count").unwrap(), Value::I32(4));
        // KIND_CPU is 2 in model_config.proto.
        assert_eq!(
            *group.get_field_by_name("kind").unwrap(),
            Value::EnumNumber(2)
        );
        // Everything else is as it was: the original with only the count changed normalizes
        // to the same text.
        let by_hand = FIXED_CAPACITY.replace("count: 2", "count: 4");
        assert_eq!(written, normalized(&by_hand).unwrap());
        assert!(!written.contains("A comment"), "{written}");
    }

    #[test]
    fn nested_messages_maps_enums_and_lists_are_set() {
        let written = set(
            FIXED_CAPACITY,
            "dynamic_batching.max_queue_delay_microseconds",
            json!(100),
        )
        .unwrap();
        assert!(
            written.contains("max_queue_delay_microseconds: 100"),
            "{written}"
        );
        let written = set(
            FIXED_CAPACITY,
            "parameters[execute_delay_ms].string_value",
            json!("20"),
        )
        .unwrap();
        assert!(written.contains("string_value: \"20\""), "{written}");
        assert!(!written.contains("\"50\""), "{written}");
        // A key with dots in it is one key.
        let written = set(
            FIXED_CAPACITY,
            "parameters[\"cuda.graphs\"].string_value",
            json!("on"),
        )
        .unwrap();
        assert!(written.contains("key: \"cuda.graphs\""), "{written}");
        let written = set(FIXED_CAPACITY, "instance_group[0].kind", json!("KIND_GPU")).unwrap();
        assert!(written.contains("KIND_GPU"), "{written}");
        let written = set(
            FIXED_CAPACITY,
            "dynamic_batching.preferred_batch_size",
            json!([4, 8]),
        )
        .unwrap();
        let config = parse(&written).unwrap();
        let batching = field(&config, "dynamic_batching");
        assert_eq!(
            *batching
                .as_message()
                .unwrap()
                .get_field_by_name("preferred_batch_size")
                .unwrap(),
            Value::List(vec![Value::I32(4), Value::I32(8)])
        );
        // A whole message, as a mapping or in text format; null clears it.
        let mapping = set(
            FIXED_CAPACITY,
            "dynamic_batching",
            json!({"max_queue_delay_microseconds": 500}),
        )
        .unwrap();
        let text = set(
            FIXED_CAPACITY,
            "dynamic_batching",
            json!("max_queue_delay_microseconds: 500"),
        )
        .unwrap();
        assert_eq!(mapping, text);
        assert!(mapping.contains("500"), "{mapping}");
        let cleared = set(&mapping, "dynamic_batching", json!(null)).unwrap();
        assert!(!cleared.contains("dynamic_batching"), "{cleared}");
    }

    #[test]
    fn bad_paths_and_values_say_what_is_wrong() {
        let cases = [
            (
                "max_batch",
                json!(1),
                "ModelConfig has no field `max_batch`",
            ),
            (
                "instance_group.count",
                json!(1),
                "`instance_group` is a list",
            ),
            ("instance_group[x].count", json!(1), "index from 0"),
            ("max_batch_size[0]", json!(1), "neither a list nor a map"),
            ("max_batch_size.x", json!(1), "not a message"),
            ("parameters", json!(1), "is a map"),
            ("max_batch_size", json!("8"), "takes an integer"),
            ("max_batch_size", json!(1.5), "takes an integer"),
            (
                "max_batch_size",
                json!(3_000_000_000u64),
                "from -2147483648 to 2147483647",
            ),
            (
                "instance_group[0].kind",
                json!("KIND_TPU"),
                "one of KIND_AUTO",
            ),
            ("name", json!(5), "quote it"),
            ("dynamic_batching", json!(5), "a mapping"),
            ("instance_group[0].count", json!(null), "top-level"),
            (
                "instance_group[3].count",
                json!(1),
                "has 1 entry (index 3 is past the end)",
            ),
        ];
        for (i, (path, value, expected)) in cases.into_iter().enumerate() {
            let err = set(FIXED_CAPACITY, path, value.clone()).unwrap_err();
            assert!(
                err.to_string().contains(expected),
                "{path} = {value}: {err}"
            );
            // The first six are paths no config has; the rest values that do not fit.
            match err {
                ConfigError::Path(_) => assert!(i < 6, "{path} = {value}: {err:?}"),
                ConfigError::Value(_) => assert!(i >= 6, "{path} = {value}: {err:?}"),
                ConfigError::Text(_) => panic!("{path} = {value}: {err:?}"),
            }
        }
        assert!(matches!(
            parse("max_batch_size: ["),
            Err(ConfigError::Text(_))
        ));
    }

    #[test]
    fn a_list_of_messages_may_follow_its_name_without_a_colon() {
        let cases = [
            ("input [ { name: \"a\" } ]", "input :[ { name: \"a\" } ]"),
            ("input: [ { name: \"a\" } ]", "input: [ { name: \"a\" } ]"),
            ("dims: [ 4 ]", "dims: [ 4 ]"),
            // An enum value before a field that starts on the next line.
            ("kind: KIND_CPU\ninput [ ]", "kind: KIND_CPU\ninput :[ ]"),
            // Strings and comments are left alone.
            (
                "name: \"x [\" # y [\noutput [",
                "name: \"x [\" # y [\noutput :[",
            ),
            ("name: 'it\\'s [' input [", "name: 'it\\'s [' input :["),
        ];
        for (text, want) in cases {
            assert_eq!(with_list_colons(text), want, "{text}");
        }
    }

    #[test]
    fn the_project_s_model_configs_parse_and_normalize_stably() {
        let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models");
        let mut seen = 0;
        for entry in std::fs::read_dir(&models).unwrap() {
            let config = entry.unwrap().path().join("config.pbtxt");
            let Ok(text) = std::fs::read_to_string(&config) else {
                continue;
            };
            let once = normalized(&text).unwrap_or_else(|e| panic!("{}: {e}", config.display()));
            assert_eq!(normalized(&once).unwrap(), once, "{}", config.display());
            seen += 1;
        }
        assert!(seen >= 10, "{seen} configs under {}", models.display());
    }
}
