//! A model's `config.pbtxt`: Triton's `inference.ModelConfig` in protobuf text format, read and
//! written with prost-reflect over the descriptors of the shared proto crate (never by string
//! edits). A sweep's `models.NAME.FIELD` parameters are [`ConfigPath`]s into it.
//!
//! Written text is prost-reflect's (pretty, fields in their declared order): comments of the
//! original do not survive, and diffs compare [`normalized`] text on both sides.

use prost::Message as _;
use prost_reflect::text_format::{FormatOptions, ParseError};
use prost_reflect::{
    DescriptorPool, DynamicMessage, EnumDescriptor, FieldDescriptor, Kind, MapKey,
    MessageDescriptor, Value,
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
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The text is not `inference.ModelConfig` in protobuf text format.
    #[error(transparent)]
    Text(#[from] ParseError),
    /// A path names no field of `inference.ModelConfig`, or subscripts one wrongly.
    #[error(transparent)]
    Path(#[from] ConfigPathError),
    /// A value does not fit the field at its path, or the config has no such entry.
    #[error(transparent)]
    Value(#[from] ConfigValueError),
}

/// A path that names no field of `inference.ModelConfig`, or subscripts one wrongly. `path` is
/// the whole path as written, `field` the part of it that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigPathError {
    /// A field below a list (or map) named without a subscript.
    #[error("`{path}`: `{list}` is a list: name an entry, `{list}[0].{field}`")]
    BelowAList {
        path: String,
        list: String,
        field: String,
    },
    /// A field below a field that is not a message.
    #[error("`{path}`: `{field}` follows a field that is not a message")]
    BelowAScalar { path: String, field: String },
    #[error("`{path}`: an empty field name")]
    EmptyName { path: String },
    /// `message` has no field `field`; `fields` are the ones it has.
    #[error("`{path}`: {message} has no field `{field}` (its fields: {})", .fields.join(", "))]
    NoSuchField {
        path: String,
        message: String,
        field: String,
        fields: Vec<String>,
    },
    #[error("`{path}`: `[` without `]`")]
    UnclosedSubscript { path: String },
    #[error("`{path}`: `{field}` takes one subscript")]
    TwoSubscripts { path: String, field: String },
    /// A list's subscript that is not an index.
    #[error("`{path}`: `{field}` is a list: its subscript is an index from 0, not `{subscript}`")]
    NotAnIndex {
        path: String,
        field: String,
        subscript: String,
    },
    /// A map's subscript without a key.
    #[error("`{path}`: `{field}` is a map: name a key, `{field}[KEY]`")]
    NoKey { path: String, field: String },
    /// A subscript of a field that is neither a list nor a map.
    #[error("`{path}`: `{field}` is neither a list nor a map: it takes no subscript")]
    NotSubscriptable { path: String, field: String },
    /// Text after a field's subscript that is no further subscript.
    #[error("`{path}`: `{rest}` after `{field}`")]
    AfterSubscript {
        path: String,
        field: String,
        rest: String,
    },
    /// A path that ends at a whole map (a sweep sets its entries).
    #[error("`{path}`: `{field}` is a map: name an entry, `{field}[KEY]`")]
    WholeMap { path: String, field: String },
}

/// A value that does not fit the field at its path (`path`, as written), or a config that has
/// no entry there.
#[derive(Debug, thiserror::Error)]
pub enum ConfigValueError {
    /// null below a top-level field (only a top-level field is cleared).
    #[error("`{path}`: null clears top-level fields only")]
    NullBelowTopLevel { path: String },
    /// A value for a whole list that is no list.
    #[error("`{path}` is a list: its value is a list (or name an entry, `{field}[0]`)")]
    NotAList { path: String, field: String },
    /// A list entry past the end of the config's list, which has `len` entries.
    #[error(
        "`{path}`: the config's `{field}` has {len} entr{} (index {index} is past the end)",
        if *.len == 1 { "y" } else { "ies" }
    )]
    PastTheEnd {
        path: String,
        field: String,
        len: usize,
        index: usize,
    },
    #[error("`{path}` takes true or false, found {value}")]
    NotABool {
        path: String,
        value: serde_json::Value,
    },
    #[error("`{path}` takes a number, found {value}")]
    NotANumber {
        path: String,
        value: serde_json::Value,
    },
    /// Not a string (a number or a bool is told to quote it).
    #[error("`{path}` takes a string, found {value}{}", quote_hint(.value))]
    NotAString {
        path: String,
        value: serde_json::Value,
    },
    /// Not a mapping (nor text) for a field of message type `message`.
    #[error("`{path}` takes a mapping (a {message} message), found {value}")]
    NotAMapping {
        path: String,
        message: String,
        value: serde_json::Value,
    },
    #[error("`{path}` takes an integer, found {value}")]
    NotAnInteger {
        path: String,
        value: serde_json::Value,
    },
    #[error("`{path}` takes an integer from {min} to {max}, found {found}")]
    IntegerOutOfRange {
        path: String,
        min: i128,
        max: i128,
        found: i128,
    },
    /// None of the enum's value names (`names`), nor its number.
    #[error("`{path}` takes one of {}, found {value}", .names.join(", "))]
    NotAnEnumValue {
        path: String,
        names: Vec<String>,
        value: serde_json::Value,
    },
    /// A mapping that is not the field's message in protobuf's JSON form.
    #[error("`{path}`: {source}")]
    Message {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    /// A string that is not the field's message in text format.
    #[error("`{path}`: {source}")]
    MessageText {
        path: String,
        #[source]
        source: ParseError,
    },
}

/// How to write a scalar as the string a field takes: ` (quote it: "5")`.
fn quote_hint(value: &serde_json::Value) -> String {
    if value.is_object() || value.is_array() {
        String::new()
    } else {
        format!(" (quote it: \"{value}\")")
    }
}

/// Parses a `config.pbtxt`'s text.
pub fn parse(text: &str) -> Result<DynamicMessage, ConfigError> {
    Ok(DynamicMessage::parse_text_format(
        descriptor(),
        &with_list_colons(text),
    )?)
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

fn field_names(message: &MessageDescriptor) -> Vec<String> {
    message.fields().map(|f| f.name().to_string()).collect()
}

impl ConfigPath {
    /// Parses and resolves `text`; the error says which part is wrong and what would be right.
    pub fn parse(text: &str) -> Result<Self, ConfigPathError> {
        let path = || text.to_string();
        let mut steps = Vec::new();
        let mut message = Some(descriptor());
        // A list or map named without a subscript, which nothing can follow.
        let mut unsubscripted: Option<String> = None;
        for part in split_outside_brackets(text) {
            let (name, brackets) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            let Some(within) = message.take() else {
                return Err(match &unsubscripted {
                    Some(list) => ConfigPathError::BelowAList {
                        path: path(),
                        list: list.clone(),
                        field: name.to_string(),
                    },
                    None => ConfigPathError::BelowAScalar {
                        path: path(),
                        field: name.to_string(),
                    },
                });
            };
            let field = named_field(&within, name, text)?;
            steps.push(Step::Field(field.clone()));
            let subscripted = push_subscripts(&field, name, brackets, text, &mut steps)?;
            let element_kind = if (field.is_map() || field.is_list()) && !subscripted {
                // A whole list is set at once (a whole map is not a value a sweep sets, its
                // entries are): nothing goes below it.
                unsubscripted = Some(name.to_string());
                None
            } else if field.is_map() {
                Some(map_value(&field).kind())
            } else {
                Some(field.kind())
            };
            if let Some(Kind::Message(m)) = element_kind {
                message = Some(m);
            }
        }
        if let Some(Step::Field(f)) = steps.last()
            && f.is_map()
        {
            return Err(ConfigPathError::WholeMap {
                path: path(),
                field: f.name().to_string(),
            });
        }
        Ok(ConfigPath {
            text: text.to_string(),
            steps,
        })
    }

    /// The config value `value` (a matrix value: YAML read as JSON) makes at this path, or why it
    /// is of the wrong type for the field.
    pub fn value_of(&self, value: &serde_json::Value) -> Result<Option<Value>, ConfigValueError> {
        let (field, whole_list) = self.leaf();
        if value.is_null() {
            return if self.steps.len() == 1 {
                // Clearing a top-level field (e.g. dynamic_batching) is a variant too.
                Ok(None)
            } else {
                Err(ConfigValueError::NullBelowTopLevel {
                    path: self.to_string(),
                })
            };
        }
        let kind = if matches!(self.steps.last(), Some(Step::Key(_))) {
            map_value(&field).kind()
        } else {
            field.kind()
        };
        if whole_list {
            let items = value.as_array().ok_or_else(|| ConfigValueError::NotAList {
                path: self.to_string(),
                field: field.name().to_string(),
            })?;
            let converted: Result<Vec<Value>, ConfigValueError> =
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
    ) -> Result<(), ConfigValueError> {
        let converted = self.value_of(value)?;
        set_in(config, &self.steps, converted, self)
    }
}

/// The field `name` of `within`, for [`ConfigPath::parse`] of `path`.
fn named_field(
    within: &MessageDescriptor,
    name: &str,
    path: &str,
) -> Result<FieldDescriptor, ConfigPathError> {
    if name.is_empty() {
        return Err(ConfigPathError::EmptyName {
            path: path.to_string(),
        });
    }
    within
        .get_field_by_name(name)
        .ok_or_else(|| ConfigPathError::NoSuchField {
            path: path.to_string(),
            message: within.name().to_string(),
            field: name.to_string(),
            fields: field_names(within),
        })
}

/// Pushes the step of `brackets`, the subscript that follows field `name` in `path` (`[0]` of a
/// list, `[KEY]` of a map, or nothing), onto `steps`; whether there was one.
fn push_subscripts(
    field: &FieldDescriptor,
    name: &str,
    mut brackets: &str,
    path: &str,
    steps: &mut Vec<Step>,
) -> Result<bool, ConfigPathError> {
    let path = || path.to_string();
    let mut subscripted = false;
    while let Some(rest) = brackets.strip_prefix('[') {
        let (inside, after) = rest
            .split_once(']')
            .ok_or_else(|| ConfigPathError::UnclosedSubscript { path: path() })?;
        if subscripted {
            return Err(ConfigPathError::TwoSubscripts {
                path: path(),
                field: name.to_string(),
            });
        }
        subscripted = true;
        if field.is_list() {
            let index = inside
                .parse::<usize>()
                .map_err(|_| ConfigPathError::NotAnIndex {
                    path: path(),
                    field: name.to_string(),
                    subscript: inside.to_string(),
                })?;
            steps.push(Step::Index(index));
        } else if field.is_map() {
            let key = inside.trim_matches('"');
            if key.is_empty() {
                return Err(ConfigPathError::NoKey {
                    path: path(),
                    field: name.to_string(),
                });
            }
            steps.push(Step::Key(key.to_string()));
        } else {
            return Err(ConfigPathError::NotSubscriptable {
                path: path(),
                field: name.to_string(),
            });
        }
        brackets = after;
    }
    if !brackets.is_empty() {
        return Err(ConfigPathError::AfterSubscript {
            path: path(),
            field: name.to_string(),
            rest: brackets.to_string(),
        });
    }
    Ok(subscripted)
}

fn set_in(
    message: &mut DynamicMessage,
    steps: &[Step],
    value: Option<Value>,
    path: &ConfigPath,
) -> Result<(), ConfigValueError> {
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
            let entry = list
                .get_mut(*i)
                .ok_or_else(|| ConfigValueError::PastTheEnd {
                    path: path.to_string(),
                    field: field.name().to_string(),
                    len,
                    index: *i,
                })?;
            match (rest.is_empty(), value) {
                (true, Some(v)) => {
                    *entry = v;
                    Ok(())
                }
                (true, None) => Err(ConfigValueError::NullBelowTopLevel {
                    path: path.to_string(),
                }),
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
                (true, None) => Err(ConfigValueError::NullBelowTopLevel {
                    path: path.to_string(),
                }),
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
fn convert(
    kind: &Kind,
    value: &serde_json::Value,
    path: &ConfigPath,
) -> Result<Value, ConfigValueError> {
    use serde_json::Value as J;
    let int = |min: i128, max: i128| integer(kind, value, path, min, max);
    let not_a_string = || ConfigValueError::NotAString {
        path: path.to_string(),
        value: value.clone(),
    };
    Ok(match kind {
        Kind::Bool => match value {
            J::Bool(b) => Value::Bool(*b),
            _ => {
                return Err(ConfigValueError::NotABool {
                    path: path.to_string(),
                    value: value.clone(),
                });
            }
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
            None => {
                return Err(ConfigValueError::NotANumber {
                    path: path.to_string(),
                    value: value.clone(),
                });
            }
        },
        Kind::String => match value {
            J::String(s) => Value::String(s.clone()),
            _ => return Err(not_a_string()),
        },
        Kind::Bytes => match value {
            J::String(s) => Value::Bytes(s.clone().into_bytes().into()),
            _ => return Err(not_a_string()),
        },
        Kind::Enum(e) => convert_enum(e, value, path)?,
        Kind::Message(m) => convert_message(m, value, path)?,
    })
}

/// A matrix value as an integer from `min` to `max` for a field of integer kind `kind`.
fn integer(
    kind: &Kind,
    value: &serde_json::Value,
    path: &ConfigPath,
    min: i128,
    max: i128,
) -> Result<i128, ConfigValueError> {
    use serde_json::Value as J;
    let wide = matches!(
        kind,
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 | Kind::Uint64 | Kind::Fixed64
    );
    let n = match value {
        J::Number(n) => n.as_i64().map(i128::from).or(n.as_u64().map(i128::from)),
        // Protobuf's JSON writes 64-bit integers as strings.
        J::String(s) if wide => s.parse::<i128>().ok(),
        _ => None,
    };
    match n {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        Some(n) => Err(ConfigValueError::IntegerOutOfRange {
            path: path.to_string(),
            min,
            max,
            found: n,
        }),
        None => Err(ConfigValueError::NotAnInteger {
            path: path.to_string(),
            value: value.clone(),
        }),
    }
}

/// A matrix value as a value of enum `e`: one of its names, or its number.
fn convert_enum(
    e: &EnumDescriptor,
    value: &serde_json::Value,
    path: &ConfigPath,
) -> Result<Value, ConfigValueError> {
    use serde_json::Value as J;
    let number = match value {
        J::String(s) => e.get_value_by_name(s),
        J::Number(n) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .and_then(|n| e.get_value(n)),
        _ => None,
    };
    match number {
        Some(v) => Ok(Value::EnumNumber(v.number())),
        None => Err(ConfigValueError::NotAnEnumValue {
            path: path.to_string(),
            names: e.values().map(|v| v.name().to_string()).collect(),
            value: value.clone(),
        }),
    }
}

/// A matrix value as a message of type `m`: a mapping in protobuf's JSON form, or text format.
fn convert_message(
    m: &MessageDescriptor,
    value: &serde_json::Value,
    path: &ConfigPath,
) -> Result<Value, ConfigValueError> {
    use serde_json::Value as J;
    Ok(match value {
        // A message as a mapping, in protobuf's JSON form (field names as in the .proto).
        J::Object(_) => Value::Message(
            DynamicMessage::deserialize(m.clone(), value.clone()).map_err(|source| {
                ConfigValueError::Message {
                    path: path.to_string(),
                    source,
                }
            })?,
        ),
        // Or in text format, as config.pbtxt writes it.
        J::String(s) => Value::Message(DynamicMessage::parse_text_format(m.clone(), s).map_err(
            |source| ConfigValueError::MessageText {
                path: path.to_string(),
                source,
            },
        )?),
        _ => {
            return Err(ConfigValueError::NotAMapping {
                path: path.to_string(),
                message: m.name().to_string(),
                value: value.clone(),
            });
        }
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

    /// An error's variant, by name.
    fn kind(err: &ConfigError) -> &'static str {
        use ConfigPathError as P;
        use ConfigValueError as V;
        match err {
            ConfigError::Text(_) => "Text",
            ConfigError::Path(p) => match p {
                P::BelowAList { .. } => "BelowAList",
                P::BelowAScalar { .. } => "BelowAScalar",
                P::EmptyName { .. } => "EmptyName",
                P::NoSuchField { .. } => "NoSuchField",
                P::UnclosedSubscript { .. } => "UnclosedSubscript",
                P::TwoSubscripts { .. } => "TwoSubscripts",
                P::NotAnIndex { .. } => "NotAnIndex",
                P::NoKey { .. } => "NoKey",
                P::NotSubscriptable { .. } => "NotSubscriptable",
                P::AfterSubscript { .. } => "AfterSubscript",
                P::WholeMap { .. } => "WholeMap",
            },
            ConfigError::Value(v) => match v {
                V::NullBelowTopLevel { .. } => "NullBelowTopLevel",
                V::NotAList { .. } => "NotAList",
                V::PastTheEnd { .. } => "PastTheEnd",
                V::NotABool { .. } => "NotABool",
                V::NotANumber { .. } => "NotANumber",
                V::NotAString { .. } => "NotAString",
                V::NotAMapping { .. } => "NotAMapping",
                V::NotAnInteger { .. } => "NotAnInteger",
                V::IntegerOutOfRange { .. } => "IntegerOutOfRange",
                V::NotAnEnumValue { .. } => "NotAnEnumValue",
                V::Message { .. } => "Message",
                V::MessageText { .. } => "MessageText",
            },
        }
    }

    #[test]
    fn bad_paths_and_values_say_what_is_wrong() {
        let paths = [
            (
                "max_batch",
                "NoSuchField",
                "ModelConfig has no field `max_batch`",
            ),
            (
                "instance_group.count",
                "BelowAList",
                "`instance_group` is a list: name an entry, `instance_group[0].count`",
            ),
            ("instance_group[x].count", "NotAnIndex", "index from 0"),
            (
                "max_batch_size[0]",
                "NotSubscriptable",
                "neither a list nor a map",
            ),
            ("max_batch_size.x", "BelowAScalar", "not a message"),
            (
                "parameters",
                "WholeMap",
                "`parameters`: `parameters` is a map: name an entry, `parameters[KEY]`",
            ),
            (
                "dynamic_batching..x",
                "EmptyName",
                "`dynamic_batching..x`: an empty field name",
            ),
            ("instance_group[0", "UnclosedSubscript", "`[` without `]`"),
            (
                "instance_group[0][1].count",
                "TwoSubscripts",
                "`instance_group` takes one subscript",
            ),
            (
                "parameters[].string_value",
                "NoKey",
                "`parameters` is a map: name a key, `parameters[KEY]`",
            ),
            (
                "instance_group[0]x.count",
                "AfterSubscript",
                "`x` after `instance_group`",
            ),
        ];
        for (path, want, expected) in paths {
            let err = set(FIXED_CAPACITY, path, json!(1)).unwrap_err();
            assert_eq!(kind(&err), want, "{path}: {err:?}");
            assert!(err.to_string().contains(expected), "{path}: {err}");
            // A path is refused before any config is read.
            assert_eq!(
                ConfigPath::parse(path).unwrap_err().to_string(),
                err.to_string()
            );
        }
        let values = [
            (
                "max_batch_size",
                json!("8"),
                "NotAnInteger",
                "takes an integer",
            ),
            (
                "max_batch_size",
                json!(1.5),
                "NotAnInteger",
                "takes an integer",
            ),
            (
                "max_batch_size",
                json!(3_000_000_000u64),
                "IntegerOutOfRange",
                "from -2147483648 to 2147483647",
            ),
            (
                "instance_group[0].kind",
                json!("KIND_TPU"),
                "NotAnEnumValue",
                "one of KIND_AUTO",
            ),
            (
                "name",
                json!(5),
                "NotAString",
                "`name` takes a string, found 5 (quote it: \"5\")",
            ),
            (
                "response_cache.enable",
                json!(5),
                "NotABool",
                "true or false",
            ),
            (
                "sequence_batching.direct.minimum_slot_utilization",
                json!("x"),
                "NotANumber",
                "takes a number",
            ),
            ("dynamic_batching", json!(5), "NotAMapping", "a mapping"),
            (
                "dynamic_batching",
                json!({"bogus": 1}),
                "Message",
                "`dynamic_batching`: ",
            ),
            (
                "dynamic_batching",
                json!("bogus: 1"),
                "MessageText",
                "`dynamic_batching`: ",
            ),
            (
                "dynamic_batching.preferred_batch_size",
                json!(4),
                "NotAList",
                "its value is a list (or name an entry, `preferred_batch_size[0]`)",
            ),
            (
                "instance_group[0].count",
                json!(null),
                "NullBelowTopLevel",
                "top-level",
            ),
            (
                "parameters[k].string_value",
                json!(null),
                "NullBelowTopLevel",
                "top-level",
            ),
            (
                "instance_group[3].count",
                json!(1),
                "PastTheEnd",
                "has 1 entry (index 3 is past the end)",
            ),
            (
                "model_warmup[0].name",
                json!("x"),
                "PastTheEnd",
                "has 0 entries (index 0 is past the end)",
            ),
        ];
        for (path, value, want, expected) in values {
            let err = set(FIXED_CAPACITY, path, value.clone()).unwrap_err();
            assert_eq!(kind(&err), want, "{path} = {value}: {err:?}");
            assert!(
                err.to_string().contains(expected),
                "{path} = {value}: {err}"
            );
        }
        let err = parse("max_batch_size: [").unwrap_err();
        assert_eq!(kind(&err), "Text", "{err:?}");
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
