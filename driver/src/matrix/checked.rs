//! Values checked where they are read: serde `deserialize_with` functions (and `with`
//! modules for durations) that refuse a value breaking its rule ([`Rule`]: bounds from
//! [`super::bounds`], DNS labels, quantities), so that a deserialized matrix holds none and
//! nothing downstream checks them again. [`super::validate`] keeps the rules across fields.
//!
//! serde stops at its first error, and a matrix file gets every problem reported at once. So
//! [`read_all`] reads the document again after each refusal with one more refusal *forgiven*:
//! the refused value read as the nearest one allowed. The text fixes the order of reading, so
//! the n-th refusal is the same value in every pass. A document read with forgiven values is
//! rejected (with every refusal), so such a value never leaves this module's caller.

use std::cell::Cell;
use std::fmt::{self, Display};
use std::ops::RangeInclusive;
use std::str::FromStr;
use std::time::Duration;

use indexmap::IndexMap;
use serde::de::{DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::bounds::{
    MAX_ARG_LEN, MAX_ARGS, MAX_BATCH_SIZE, MAX_CHECKS, MAX_CONCURRENCY, MAX_DURATION,
    MAX_GROUP_CONCURRENCY, MAX_MEMBERS, MAX_POLL_INTERVAL, MAX_POLLS, MAX_TRACE_SETTING, MAX_WAIT,
    MAX_WEIGHT, MIN_POLL_INTERVAL,
};
use super::source::Anchor;
use stress_common::contract::Tolerance;
use stress_common::trace::TraceShare;

/// At most this many refusals are collected from one document (each costs a pass over it);
/// the next one is reported as the last.
const MAX_REFUSALS: usize = 64;

thread_local! {
    /// The pass under way on this thread.
    static PASS: Cell<Pass> = Cell::default();
}

/// A pass of [`read_all`] over a document: the refusals it forgives, those it met, and
/// whether it ended on one (the one after the forgiven).
#[derive(Clone, Copy, Default)]
struct Pass {
    forgive: usize,
    seen: usize,
    refused: Option<Anchor>,
}

/// Reads a document with `read` until it reads or fails on something other than a refused
/// value: the document (or the error that stopped it), and the refusals on the way, in the
/// order read, each with what it refused (a map's key or a value).
pub fn read_all<T, E>(mut read: impl FnMut() -> Result<T, E>) -> (Result<T, E>, Vec<(E, Anchor)>) {
    let mut refusals = Vec::new();
    loop {
        let forgive = refusals.len();
        PASS.set(Pass {
            forgive,
            ..Pass::default()
        });
        let result = read();
        match (result, PASS.take().refused) {
            (Err(e), Some(anchor)) if forgive < MAX_REFUSALS => refusals.push((e, anchor)),
            (other, _) => return (other, refusals),
        }
    }
}

/// What one value must be.
pub trait Rule {
    /// What is written in the file.
    type Written: DeserializeOwned;
    type Value;
    /// The value written, or why it may not be and the nearest value that may.
    fn read(&self, written: Self::Written) -> Result<Self::Value, (String, Self::Value)>;
}

/// `rule`'s reading of `written`: a refusal is the pass's error, or, when a [`read_all`] pass
/// forgives it, the nearest value allowed.
fn checked<R: Rule, E: serde::de::Error>(rule: &R, written: R::Written) -> Result<R::Value, E> {
    checked_at(rule, written, Anchor::Value)
}

/// [`checked`] of a value or (`anchor`) a map's key.
fn checked_at<R: Rule, E: serde::de::Error>(
    rule: &R,
    written: R::Written,
    anchor: Anchor,
) -> Result<R::Value, E> {
    let (problem, nearest) = match rule.read(written) {
        Ok(value) => return Ok(value),
        Err(refused) => refused,
    };
    let mut pass = PASS.get();
    pass.seen += 1;
    pass.refused = (pass.seen > pass.forgive).then_some(anchor);
    PASS.set(pass);
    match pass.refused {
        Some(_) => Err(E::custom(problem)),
        None => Ok(nearest),
    }
}

/// A field a rule of values `V` checks: a value, or an optional one (its field has
/// `#[serde(default)]`).
pub trait Field<V>: Sized {
    fn read<'de, D: Deserializer<'de>, R: Rule<Value = V>>(
        d: D,
        rule: &R,
    ) -> Result<Self, D::Error>;
}

impl<V> Field<V> for V {
    fn read<'de, D: Deserializer<'de>, R: Rule<Value = V>>(d: D, rule: &R) -> Result<V, D::Error> {
        checked(rule, R::Written::deserialize(d)?)
    }
}

impl<V> Field<V> for Option<V> {
    fn read<'de, D: Deserializer<'de>, R: Rule<Value = V>>(
        d: D,
        rule: &R,
    ) -> Result<Self, D::Error> {
        Option::<R::Written>::deserialize(d)?
            .map(|w| checked(rule, w))
            .transpose()
    }
}

/// A list whose every item `rule` checks: a refusal is located at its item.
impl<V> Field<V> for Vec<V> {
    fn read<'de, D: Deserializer<'de>, R: Rule<Value = V>>(
        d: D,
        rule: &R,
    ) -> Result<Self, D::Error> {
        // (`deserialize_seq` visits a sequence only: never the None of a `null`.)
        let items = d.deserialize_seq(Entries(rule))?.unwrap_or_default();
        Ok(items.into_iter().map(|(_, item)| item).collect())
    }
}

/// An optional map whose every value `rule` checks: a refusal is located at its key.
impl<V> Field<V> for Option<IndexMap<String, V>> {
    fn read<'de, D: Deserializer<'de>, R: Rule<Value = V>>(
        d: D,
        rule: &R,
    ) -> Result<Self, D::Error> {
        Ok(d.deserialize_option(Entries(rule))?
            .map(IndexMap::from_iter))
    }
}

/// A list of maps whose every value `rule` checks: a refusal is located at its key.
impl<V> Field<V> for Vec<IndexMap<String, V>> {
    fn read<'de, D: Deserializer<'de>, R: Rule<Value = V>>(
        d: D,
        rule: &R,
    ) -> Result<Self, D::Error> {
        d.deserialize_seq(Maps(rule))
    }
}

/// A list of maps, each read by [`Entries`] through [`Map`].
struct Maps<'r, R>(&'r R);

impl<'de, R: Rule> Visitor<'de> for Maps<'_, R> {
    type Value = Vec<IndexMap<String, R::Value>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of maps")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut read = Vec::new();
        while let Some(map) = seq.next_element_seed(Map(self.0))? {
            read.push(map);
        }
        Ok(read)
    }
}

/// One map of a list (`null`: an empty one), read as an optional map's field is.
struct Map<'r, R>(&'r R);

impl<'de, R: Rule> DeserializeSeed<'de> for Map<'_, R> {
    type Value = IndexMap<String, R::Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let map: Option<Self::Value> = Field::read(d, self.0)?;
        Ok(map.unwrap_or_default())
    }
}

/// A list's items or a map's entries (a list's keys are empty), each value read by `rule`
/// through [`Item`], so that serde_path_to_error's path names it; None for `null`.
struct Entries<'r, R>(&'r R);

type Read<V> = Option<Vec<(String, V)>>;

impl<'de, R: Rule> Visitor<'de> for Entries<'_, R> {
    type Value = Read<R::Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list or a map")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut read = Vec::new();
        while let Some(item) = seq.next_element_seed(Item(self.0))? {
            read.push((String::new(), item));
        }
        Ok(Some(read))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut read = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            read.push((key, map.next_value_seed(Item(self.0))?));
        }
        Ok(Some(read))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

/// One item of a list or value of a map, read by its rule.
struct Item<'r, R>(&'r R);

impl<'de, R: Rule> DeserializeSeed<'de> for Item<'_, R> {
    type Value = R::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<R::Value, D::Error> {
        checked(self.0, R::Written::deserialize(d)?)
    }
}

/// A map of text whose every key `.0` checks: a refusal is located at the key.
struct Keys<'r, R>(&'r R);

impl<'de, R: Rule<Written = String, Value = String>> Visitor<'de> for Keys<'_, R> {
    type Value = IndexMap<String, String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut read = IndexMap::new();
        while let Some(key) = map.next_key_seed(Key(self.0))? {
            read.insert(key, map.next_value()?);
        }
        Ok(read)
    }
}

/// One key of a map, read by its rule.
struct Key<'r, R>(&'r R);

impl<'de, R: Rule<Written = String, Value = String>> DeserializeSeed<'de> for Key<'_, R> {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        checked_at(self.0, String::deserialize(d)?, Anchor::Key)
    }
}

/// tritonserver's arguments (a server template's `args`): [`args`].
pub fn server_args<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let rule = Text {
        what: "",
        problem: too_long,
        stand_in: "",
    };
    args(d, &rule)
}

/// The worker's arguments (a client template's `extra_args`): [`args`], none of them a flag
/// the driver sets itself.
pub fn worker_args<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let rule = Text {
        what: "",
        problem: not_a_worker_arg,
        stand_in: "",
    };
    args(d, &rule)
}

/// A program's arguments: at most [`MAX_ARGS`], each read by `rule`.
fn args<'de, D: Deserializer<'de>>(d: D, rule: &Text) -> Result<Vec<String>, D::Error> {
    let mut items: Vec<String> = Field::read(d, rule)?;
    let kept = checked(&Count::new(0, MAX_ARGS, "arguments"), items.len())?;
    items.truncate(kept);
    Ok(items)
}

/// Whether `s` is a portable environment variable name.
pub fn is_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Environment variables: each name portable (letters, digits and '_', not starting with a
/// digit), a refused one located at its key.
pub fn env<'de, D: Deserializer<'de>>(d: D) -> Result<IndexMap<String, String>, D::Error> {
    fn problem(_: &str, name: &str) -> Option<String> {
        (!is_env_name(name)).then(|| {
            format!(
                "{name:?} is not an environment variable name (letters, digits and '_', not \
                 starting with a digit)"
            )
        })
    }
    let rule = Text {
        what: "",
        problem,
        stand_in: "X",
    };
    d.deserialize_map(Keys(&rule))
}

/// A duration written the humantime way (`90s`, `5m`, `1h 30m`), within `[min, max]`.
pub struct Span(Duration, Duration);

impl Rule for Span {
    type Written = String;
    type Value = Duration;
    fn read(&self, text: String) -> Result<Duration, (String, Duration)> {
        let Span(min, max) = *self;
        let value = super::duration::parse(&text).map_err(|problem| (problem, min))?;
        stress_common::limits::within(value, min, max)
            .map(|()| value)
            .map_err(|e| (e.to_string(), value.clamp(min, max)))
    }
}

/// A duration longer than zero and at most `.0`. A refused one reads as the longest allowed:
/// of the stand-ins, the one no rule across fields takes for a problem of its own (a run of
/// any length fits the poll interval, the warm-up, the faults a zero would have refused).
pub struct Positive(Duration);

impl Rule for Positive {
    type Written = String;
    type Value = Duration;
    fn read(&self, text: String) -> Result<Duration, (String, Duration)> {
        let longest = self.0;
        match Span(Duration::ZERO, longest).read(text) {
            Ok(value) if value.is_zero() => Err(("must be longer than zero".into(), longest)),
            Ok(value) => Ok(value),
            Err((problem, _)) => Err((problem, longest)),
        }
    }
}

/// `.0`, a refused value read as `.1` rather than as `.0`'s stand-in: where the values a rule
/// across fields reads beside it make another stand-in the one that rule finds nothing in.
pub struct StandIn<R: Rule>(R, R::Value);

impl<R: Rule<Value: Clone>> Rule for StandIn<R> {
    type Written = R::Written;
    type Value = R::Value;
    fn read(&self, written: R::Written) -> Result<R::Value, (String, R::Value)> {
        self.0
            .read(written)
            .map_err(|(problem, _)| (problem, self.1.clone()))
    }
}

/// A count within `[min, max]`: above `max`, the message names what it counts (`unit`);
/// below `min` (0 or 1), what the count is and what to do instead (`words`).
pub struct Count<T = u32> {
    min: T,
    max: T,
    unit: &'static str,
    words: (&'static str, &'static str),
}

impl<T> Count<T> {
    const fn new(min: T, max: T, unit: &'static str) -> Self {
        let words = ("", "");
        Count {
            min,
            max,
            unit,
            words,
        }
    }
}

impl<T: DeserializeOwned + Copy + Ord + Display> Rule for Count<T> {
    type Written = T;
    type Value = T;
    fn read(&self, value: T) -> Result<T, (String, T)> {
        let nearest = value.clamp(self.min, self.max);
        if value < self.min {
            let ((named, instead), min) = (self.words, self.min);
            Err((
                format!("{named}must be at least {min}, found {value}{instead}"),
                nearest,
            ))
        } else if value > self.max {
            let (unit, max) = (self.unit, self.max);
            Err((
                format!("{value} {unit} is more than the {max} allowed"),
                nearest,
            ))
        } else {
            Ok(value)
        }
    }
}

/// A count of runs within the range, the reason after it.
pub struct Runs<T>(RangeInclusive<T>, &'static str);

impl<T: DeserializeOwned + Copy + PartialOrd + Display> Rule for Runs<T> {
    type Written = T;
    type Value = T;
    fn read(&self, value: T) -> Result<T, (String, T)> {
        let (min, max, why) = (*self.0.start(), *self.0.end(), self.1);
        if self.0.contains(&value) {
            return Ok(value);
        }
        let nearest = if value < min { min } else { max };
        Err((
            format!("must be from {min} to {max} runs{why}, found {value}"),
            nearest,
        ))
    }
}

/// A command-line flag's reading (clap's value parser) by the matrix's rule of the same value.
pub fn flag<R: Rule>(rule: &R, written: &str) -> Result<R::Value, String>
where
    R::Written: FromStr,
{
    let value = written
        .parse()
        .map_err(|_| format!("{written:?} is not a number"))?;
    rule.read(value).map_err(|(problem, _)| problem)
}

/// A number read into a type that refuses what it may not hold (`TryFrom<f64>`), in its words;
/// the type's default stands in for a refused one.
pub struct FromNumber<T>(std::marker::PhantomData<T>);

impl<T: TryFrom<f64, Error: std::fmt::Display> + Default> Rule for FromNumber<T> {
    type Written = f64;
    type Value = T;
    fn read(&self, value: f64) -> Result<T, (String, T)> {
        T::try_from(value).map_err(|e| (e.to_string(), T::default()))
    }
}

/// A number within `low` and `high`, each end in or out of it (`high` may be infinite: no
/// upper bound), said with `words`: what it is (e.g. "a fraction ") and a hint after it.
pub struct Interval {
    low: (f64, bool),
    high: (f64, bool),
    words: (&'static str, &'static str),
}

impl Interval {
    const fn new(low: (f64, bool), high: (f64, bool)) -> Self {
        let words = ("", "");
        Interval { low, high, words }
    }
}

impl Rule for Interval {
    type Written = f64;
    type Value = f64;
    fn read(&self, value: f64) -> Result<f64, (String, f64)> {
        let ((low, low_in), (high, high_in)) = (self.low, self.high);
        let above = if low_in { value >= low } else { value > low };
        let below = if high_in { value <= high } else { value < high };
        if above && below {
            return Ok(value);
        }
        let from = if low_in { "at least" } else { "above" };
        let to = match (high.is_finite(), high_in) {
            (false, _) => String::new(),
            (true, true) => format!(" and at most {high}"),
            (true, false) => format!(" and below {high}"),
        };
        let (what, hint) = self.words;
        let stand_in = if high.is_finite() {
            (low + high) / 2.0
        } else {
            low + 1.0
        };
        Err((
            format!("must be {what}{from} {low}{to}{hint}, found {value}"),
            stand_in,
        ))
    }
}

/// A fraction above 0 and at most 1.
const SHARE: Interval = Interval::new((0.0, false), (1.0, true));

/// The longest a DNS-1123 label may be.
pub const MAX_LABEL_LEN: usize = 63;

/// What a DNS-1123 label is, for messages.
pub const LABEL_RULE: &str = "lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit";

/// Whether `s` is a DNS-1123 label: 1 to 63 lowercase letters, digits and '-', starting and
/// ending with a letter or digit.
pub fn is_dns_label(s: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_LABEL_LEN
        && b.iter().all(|&c| alnum(c) || c == b'-')
        && alnum(b[0])
        && alnum(b[b.len() - 1])
}

/// Text that `problem` finds nothing wrong with (its message names the value as `what`); a
/// refused one reads as `stand_in`.
pub struct Text {
    what: &'static str,
    problem: fn(what: &str, text: &str) -> Option<String>,
    stand_in: &'static str,
}

impl Rule for Text {
    type Written = String;
    type Value = String;
    fn read(&self, text: String) -> Result<String, (String, String)> {
        match (self.problem)(self.what, &text) {
            None => Ok(text),
            Some(problem) => Err((problem, self.stand_in.into())),
        }
    }
}

/// A name that is a DNS-1123 label (it names pods and processes).
const fn label(what: &'static str) -> Text {
    fn problem(what: &str, name: &str) -> Option<String> {
        let rule = LABEL_RULE;
        (!is_dns_label(name)).then(|| format!("{what} {name:?} is not a DNS-1123 label ({rule})"))
    }
    Text {
        what,
        problem,
        stand_in: "x",
    }
}

/// A Kubernetes CPU quantity as we accept it: `1`, `2.5`, `500m`.
pub const CPU_QUANTITY: &str = r"^[0-9]+(\.[0-9]+)?m?$";
/// A Kubernetes memory quantity as we accept it: `512Mi`, `2Gi`, `1G`, `1000`.
pub const MEMORY_QUANTITY: &str = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$";

/// What is wrong with a quantity of `what` that should match `pattern` (`examples` of it).
fn quantity_problem(what: &str, pattern: &str, examples: &str, text: &str) -> Option<String> {
    let valid = regex::Regex::new(pattern)
        .expect("a valid pattern")
        .is_match(text);
    (!valid).then(|| format!("invalid {what} quantity {text:?} (write e.g. {examples})"))
}

/// Characters a model name cannot hold: the worker's flags use them as separators
/// (`NAME@VERSION:WEIGHT`, `a,b`, `MODEL/INPUT:DIMS`, `MODEL=FILE`).
const MODEL_NAME_RESERVED: &str = "@:,/=";

fn empty(_: &str, text: &str) -> Option<String> {
    text.trim().is_empty().then(|| "must not be empty".into())
}

fn too_long(_: &str, arg: &str) -> Option<String> {
    (arg.len() > MAX_ARG_LEN).then(|| {
        format!(
            "an argument of {} bytes is longer than the {MAX_ARG_LEN} allowed",
            arg.len()
        )
    })
}

/// A worker's argument may not set what the driver itself gives every worker (the contract's
/// flags, where its records go): the run would not be the one recorded.
fn not_a_worker_arg(_: &str, arg: &str) -> Option<String> {
    static RESERVED: std::sync::LazyLock<Vec<String>> =
        std::sync::LazyLock::new(stress_common::contract::reserved_worker_flags);
    let flag = arg.split('=').next().unwrap_or_default();
    too_long("", arg).or_else(|| {
        RESERVED.iter().any(|r| r == flag).then(|| {
            format!(
                "{flag} is set by the driver for every worker; use the matrix field that sets \
                 it instead of extra_args"
            )
        })
    })
}

fn not_a_model_name(_: &str, name: &str) -> Option<String> {
    let reserved = name.chars().find(|c| MODEL_NAME_RESERVED.contains(*c));
    empty("", name).or_else(|| {
        reserved.map(|c| {
            format!(
                "model name {name:?} contains {c:?}, which the worker's flags reserve \
                 ({MODEL_NAME_RESERVED:?})"
            )
        })
    })
}

/// An http:// or https:// URL.
const fn http(what: &'static str) -> Text {
    fn problem(what: &str, url: &str) -> Option<String> {
        let http = url.starts_with("http://") || url.starts_with("https://");
        (!http).then(|| format!("{what} is an http:// or https:// URL, found {url:?}"))
    }
    Text {
        what,
        problem,
        stand_in: "http://x",
    }
}

/// An absolute path to a directory other than the root.
const fn absolute_dir(what: &'static str) -> Text {
    fn problem(what: &str, dir: &str) -> Option<String> {
        let absolute = dir.starts_with('/') && !dir.trim_end_matches('/').is_empty();
        (!absolute).then(|| format!("{what} {dir:?} must be an absolute path other than /"))
    }
    Text {
        what,
        problem,
        stand_in: "/x",
    }
}

/// Checked fields: `name: Value = rule;` is a `deserialize_with` function of a value or an
/// optional one; `mod name = span;` is a `with` module of a duration.
macro_rules! checked_fields {
    ($($(#[doc = $doc:literal])* $name:ident: $value:ty = $rule:expr;)*) => {$(
        $(#[doc = $doc])*
        pub fn $name<'de, D: Deserializer<'de>, T: Field<$value>>(d: D) -> Result<T, D::Error> {
            T::read(d, &$rule)
        }
    )*};
}

macro_rules! durations {
    ($($(#[doc = $doc:literal])* $name:ident = $rule:expr;)*) => {$(
        $(#[doc = $doc])*
        pub mod $name {
            pub use crate::matrix::duration::serialize;
            use super::*;
            pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
                <Duration as Field<Duration>>::read(d, &$rule)
            }
        }
    )*};
}

/// Optional durations: `name = rule;` is a `with` module of an `Option<Duration>` (its field
/// has `#[serde(default)]`).
macro_rules! optional_durations {
    ($($(#[doc = $doc:literal])* $name:ident = $rule:expr;)*) => {$(
        $(#[doc = $doc])*
        pub mod $name {
            pub use crate::matrix::duration::option::serialize;
            use super::*;
            pub fn deserialize<'de, D: Deserializer<'de>>(
                d: D,
            ) -> Result<Option<Duration>, D::Error> {
                <Option<Duration> as Field<Duration>>::read(d, &$rule)
            }
        }
    )*};
}

optional_durations! {
    /// Triton's OpenTelemetry export delay: from 10ms to 1m.
    export_delay = Span(Duration::from_millis(10), Duration::from_secs(60));
    /// A time within a run (a fault's `at` and `jitter`, a network fault's delay and jitter):
    /// up to 30 days; a refused one reads as 0, which moves no fault past the run's end.
    fault_time = StandIn(Span(Duration::ZERO, MAX_DURATION), Duration::ZERO);
    /// How often a fault repeats (`every`): longer than zero and up to 30 days.
    fault_every = Positive(MAX_DURATION);
    /// How long a fault lasts (`duration`): longer than zero and up to 30 days; a refused one
    /// reads as the shortest, which moves no fault past the run's end.
    fault_length = StandIn(Positive(MAX_DURATION), Duration::from_nanos(1));
}

/// A run's length that may not be zero (`run.duration`, `driver run --duration`): up to 30
/// days.
pub const RUN_LENGTH: Positive = Positive(MAX_DURATION);

/// Any other wait of the driver (warm-up, a spike, `--pending-timeout`): up to a day.
pub const WAIT: Span = Span(Duration::ZERO, MAX_WAIT);

durations! {
    /// A run's length (`run.duration`, an SLO's `delay`): up to 30 days.
    run_length = Span(Duration::ZERO, MAX_DURATION);
    /// [`RUN_LENGTH`].
    positive_run_length = RUN_LENGTH;
    /// [`WAIT`].
    wait = WAIT;
    /// A wait that may not be zero (the servers' start-up, a p99 target): up to a day.
    positive_wait = Positive(MAX_WAIT);
    /// The status store's poll interval: from 100ms to 1h.
    poll_interval = Span(MIN_POLL_INTERVAL, MAX_POLL_INTERVAL);
    /// A check interval of the capacity controller: from 100ms to a day.
    check_interval = Span(MIN_POLL_INTERVAL, MAX_WAIT);
    /// How long the store may be out before the run fails: from 10s to a day.
    store_outage = Span(Duration::from_secs(10), MAX_WAIT);
    /// How long a report's webhook may take: from 1s to 10m.
    webhook_timeout = Span(Duration::from_secs(1), Duration::from_secs(600));
    /// How long a fault's clients may take to recover: up to a day (a refused one reads as 0,
    /// which fits any run the fault's timing fits).
    recovery = StandIn(Span(Duration::ZERO, MAX_WAIT), Duration::ZERO);
}

/// How many times `run.repeat` (and `driver run --repeat`) may run the load.
pub const REPEATS: Runs<u32> = Runs(1..=100, "");

/// How many runs change points may be looked for in (`regression.change_point_window`,
/// `driver history --window`): a change needs two runs on either side to have a spread.
pub const CHANGE_POINT_WINDOW: Runs<usize> = Runs(4..=500, " (a change needs runs on both sides)");

/// The smallest change called (`regression.min_effect`, `driver compare` and `driver history
/// --min-effect`).
pub const MIN_EFFECT: Interval = Interval {
    words: ("a fraction of ", " (0.1 = 10%)"),
    ..Interval::new((0.0, true), (10.0, false))
};

/// How many blocks of each side a comparison (`compare.repeats`) may run.
pub const COMPARE_REPEATS: Runs<u32> = Runs(2..=50, " of each side");

checked_fields! {
    /// A worker's streams (a client template's `concurrency`).
    streams: u32 = Count::new(1, MAX_CONCURRENCY, "streams");
    /// A server group's `instances` (the run's members in all are a rule across groups).
    servers: u32 = Count::new(1, MAX_MEMBERS as u32, "servers");
    /// A client group's `instances`.
    clients: u32 = Count::new(1, MAX_MEMBERS as u32, "clients");
    /// A client group's `corr_id_block_size` (whether the blocks fit in 64 bits together, and
    /// hold its template's streams, are rules across fields).
    corr_ids: u64 = Count::new(1, u64::MAX, "correlation ids");
    /// Polls of a fail-fast rule that may be off (0).
    polls: u32 = Count::new(0, MAX_POLLS, "polls");
    /// Polls of the heartbeat rule: 0 would fail every worker between two of its beats.
    heartbeat_polls: u32 = Count::new(1, MAX_POLLS, "polls");
    /// A model's weight in a mix.
    model_weight: u32 = Count {
        words: ("model weight ", " (leave the model out instead)"),
        ..Count::new(1, MAX_WEIGHT, "(weight)")
    };
    /// A scenario's weight in a client template's mix.
    scenario_weight: u32 = Count {
        words: ("scenario weight ", " (leave the scenario out instead)"),
        ..Count::new(1, MAX_WEIGHT, "(weight)")
    };
    /// An Infer batch size.
    batch_size: u32 = Count::new(1, MAX_BATCH_SIZE, "(batch size)");
    /// Triton's trace rate (one in N); its lower bound depends on the mode.
    trace_rate: u32 = Count::new(0, MAX_TRACE_SETTING, "(one in N)");
    /// Traces (a count, a file's).
    traces: u32 = Count::new(1, MAX_TRACE_SETTING, "traces");
    /// A capacity group's concurrency (all its streams).
    group_concurrency: u32 = Count::new(1, MAX_GROUP_CONCURRENCY, "(concurrency)");
    /// Checks of the capacity controller that may be none (settle periods).
    checks: u32 = Count::new(0, MAX_CHECKS, "checks");
    /// Checks of the capacity controller that need one (stable checks, decreases).
    checks_from_one: u32 = Count::new(1, MAX_CHECKS, "checks");
    /// `run.repeat`.
    repeat: u32 = REPEATS;
    /// `regression.window`: the runs a regression is judged against.
    regression_window: usize = Runs(1..=50, "");
    /// `regression.change_point_window`.
    change_point_window: usize = CHANGE_POINT_WINDOW;
    /// `compare.repeats`.
    compare_repeats: u32 = COMPARE_REPEATS;
    /// `run.name`.
    run_name: String = label("run name");
    /// `run.namespace`.
    namespace: String = label("namespace");
    /// A server template's volume name.
    volume_name: String = label("volume name");
    /// Text that may not be empty (an image).
    filled: String = Text { what: "", problem: empty, stand_in: "x" };
    /// A model's name.
    model_name: String = Text { what: "", problem: not_a_model_name, stand_in: "x" };
    /// A trace collector's endpoint.
    otlp_endpoint: String = http("an OTLP/HTTP endpoint");
    /// A report's webhook.
    webhook: String = http("a webhook");
    /// A Prometheus server's base URL.
    prometheus_url: String = http("a Prometheus URL");
    /// Prometheus label matchers (a selector without its braces).
    label_matchers: String = Text {
        what: "",
        problem: |_, text| text.contains(['{', '}']).then(|| format!(
            "give the label matchers without braces (e.g. job=\"triton\"), found {text:?}"
        )),
        stand_in: "",
    };
    /// Where a model image's repository is.
    model_source: String = absolute_dir("source");
    /// Where a model image's repository is copied to.
    model_path: String = absolute_dir("path");
    /// The fraction a capacity controller takes off at a decrease.
    decrease_rate: f64 = Interval::new((0.0, false), (1.0, false));
    /// The band around a p99 target in which it counts as on target.
    tolerance: f64 = Interval::new((0.0, true), (1.0, false));
    /// A share (the safe rate's of the maximum, an autoscaler's margin).
    share: f64 = SHARE;
    /// The share of packets a network fault drops.
    loss: f64 = Interval { words: ("a fraction ", " (0.05 = 5%)"), ..SHARE };
    /// The smallest change a regression is called on.
    min_effect: f64 = MIN_EFFECT;
    /// The share of a client's requests it traces.
    trace_share: TraceShare = FromNumber(std::marker::PhantomData);
    /// How far a float output may be from its validation data.
    answer_tolerance: Tolerance = FromNumber(std::marker::PhantomData);
    /// A known issue's allowance.
    per_hour: f64 = Interval {
        words: ("a number of failures ", ""),
        ..Interval::new((0.0, false), (f64::INFINITY, false))
    };
    /// A spike's rate.
    spike_rate: f64 = Interval {
        words: ("a number of requests per second of ", ""),
        ..Interval::new((1.0, true), (1e7, true))
    };
    /// A member's CPU request.
    cpu: String = Text {
        what: "CPU",
        problem: |what, text| quantity_problem(what, CPU_QUANTITY, r#""1", "2.5" or "500m""#, text),
        stand_in: "1",
    };
    /// A member's memory request.
    memory: String = Text {
        what: "memory",
        problem: |what, text| quantity_problem(what, MEMORY_QUANTITY, r#""512Mi", "2Gi" or "1G""#, text),
        stand_in: "1",
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Counts {
        #[serde(deserialize_with = "streams")]
        a: u32,
        #[serde(default, deserialize_with = "streams")]
        b: Option<u32>,
        c: u32,
    }

    fn read(text: &str) -> (Result<Counts, String>, Vec<String>) {
        let (result, refusals) = read_all(|| {
            serde_saphyr::from_str::<Counts>(text).map_err(|e| e.without_snippet().to_string())
        });
        let refusals = refusals.into_iter().map(|(e, _)| e).collect();
        (result, refusals)
    }

    #[test]
    fn a_document_within_its_bounds_reads_in_one_pass() {
        let (counts, refusals) = read("{a: 1, b: 100000, c: 7}");
        assert!(refusals.is_empty());
        let counts = counts.unwrap();
        assert_eq!((counts.a, counts.b, counts.c), (1, Some(100000), 7));
    }

    #[test]
    fn every_refused_value_is_reported_and_then_the_error_that_stops_the_reading() {
        let (counts, refusals) = read("{a: 0, b: 100001, c: x}");
        assert_eq!(refusals.len(), 2, "{refusals:?}");
        assert!(
            refusals[0].contains("must be at least 1, found 0"),
            "{refusals:?}"
        );
        assert!(
            refusals[1].contains("100001 streams is more than the 100000 allowed"),
            "{refusals:?}"
        );
        assert!(counts.is_err(), "the type error stops it");
    }

    #[test]
    fn a_document_whose_only_problems_are_refusals_ends_with_none_forgiven_outside() {
        let (counts, refusals) = read("{a: 0, b: 2, c: 3}");
        assert_eq!(refusals.len(), 1);
        // The last pass forgave the refusal: its document is for the checks across fields only.
        assert_eq!(counts.unwrap().a, 1);
        // Outside read_all nothing is forgiven.
        assert!(serde_saphyr::from_str::<Counts>("{a: 0, b: 2, c: 3}").is_err());
    }

    #[derive(Debug, Deserialize)]
    struct Quantities {
        #[serde(default, deserialize_with = "cpu")]
        cpu: Option<String>,
        #[serde(default, deserialize_with = "memory")]
        memory: Option<String>,
    }

    #[test]
    fn quantities_are_kubernetes_ones() {
        let read = |field: &str, text: &str| {
            serde_saphyr::from_str::<Quantities>(&format!("{{{field}: {text:?}}}")).is_ok()
        };
        for ok in ["1", "500m", "2.5", "0.5m"] {
            assert!(read("cpu", ok), "{ok}");
        }
        for bad in ["", "m", "1.", ".5", "1 m", "one", "1Gi"] {
            assert!(!read("cpu", bad), "{bad}");
        }
        for ok in ["2Gi", "512Mi", "1G", "1000", "1.5Gi", "64k"] {
            assert!(read("memory", ok), "{ok}");
        }
        for bad in ["", "Gi", "2GB", "2 Gi", "lots"] {
            assert!(!read("memory", bad), "{bad}");
        }
        let none = serde_saphyr::from_str::<Quantities>("{}").unwrap();
        assert_eq!((none.cpu, none.memory), (None, None));
    }
}
