//! The foreign-client interface, version 1 (docs/clients.md): how a client program that is not
//! the project's worker (Python tritonclient, perf_analyzer, a service in Go or Java) is given
//! its assignment and reports what it did. The worker supervises the program as its child and
//! turns its records into the same snapshots and failure records as its own scenarios.
//!
//! The program gets an [`Assignment`] as a JSON file (`TRITON_STRESS_ASSIGNMENT`) and as
//! environment variables ([`Assignment::env`]), and writes one [`Record`] per line on stdout:
//! a `hello` first, then one `pass`, `fail` or `skip` per test. Anything else on stdout breaks
//! the interface; stderr is the program's own (its tail is kept as evidence).

use crate::signature::ErrorKind;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The interface version this code speaks.
pub const INTERFACE: u32 = 1;

/// The environment variable naming the assignment's JSON file.
pub const ASSIGNMENT_ENV: &str = "TRITON_STRESS_ASSIGNMENT";

/// The longest line a program may write on stdout: a record with many latencies is long, a line
/// without an end is a broken program, not the worker's memory to fill.
pub const MAX_LINE_BYTES: usize = 8 << 20;

/// The longest scenario or model name a record may carry, in characters.
pub const MAX_NAME_CHARS: usize = 128;

/// What a scenario or model name may hold: no control characters and no bidirectional
/// overrides (a name is a line of the report, a key of the store and a label of the metrics,
/// and must read as it is).
const NAME_PATTERN: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f\\u202a-\\u202e\\u2066-\\u2069]*$";

/// A control character, or a bidirectional override or isolate (U+202A..U+202E, U+2066..U+2069).
fn unreadable(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A record's scenario: 1 to [`MAX_NAME_CHARS`] characters, none [`unreadable`].
fn scenario<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let name = String::deserialize(d)?;
    match name.is_empty() {
        true => Err(serde::de::Error::custom("an empty scenario")),
        false => checked_name(name).map_err(serde::de::Error::custom),
    }
}

/// A record's model: as a scenario, or empty (none, or several).
fn model<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked_name(String::deserialize(d)?).map_err(serde::de::Error::custom)
}

fn checked_name(name: String) -> Result<String, String> {
    if name.chars().count() > MAX_NAME_CHARS {
        let start: String = name.chars().take(20).collect();
        return Err(format!(
            "the name {start:?}... is longer than {MAX_NAME_CHARS} characters"
        ));
    }
    match name.chars().any(unreadable) {
        true => Err(format!(
            "the name {name:?} holds a control character or a bidirectional override"
        )),
        false => Ok(name),
    }
}

/// What a foreign client is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Assignment {
    /// The interface version the worker speaks (a program that does not speak it exits non-zero
    /// with a message on stderr).
    pub interface: u32,
    /// The member this program runs as (e.g. `python-clients-0`).
    pub member: String,
    /// The servers to send to, `host:port` of the protocol's endpoint.
    pub servers: Vec<String>,
    /// `grpc` or `http`.
    pub protocol: String,
    /// The models to infer against (empty: the program's own choice).
    pub models: Vec<String>,
    /// How long to send load, seconds; the worker stops the program (SIGTERM) when it is over.
    /// None: until stopped.
    pub duration_s: Option<f64>,
    /// Seeds whatever the program draws at random.
    pub seed: u64,
    /// How many requests (or streams) in flight at once.
    pub concurrency: u32,
    /// Requests per second to send in open loop; None: closed loop at `concurrency`.
    pub rate: Option<f64>,
    /// The block of sequence correlation ids this member may use: `[first, first + count)`.
    pub correlation_ids: Option<CorrelationIds>,
}

/// A block of sequence correlation ids, unique to one member of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CorrelationIds {
    pub first: u64,
    pub count: u64,
}

impl Assignment {
    /// The assignment as environment variables, beside the file: for programs that would rather
    /// not read JSON. Lists are comma-separated; an absent value is an absent variable.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("TRITON_STRESS_INTERFACE", self.interface.to_string()),
            ("TRITON_STRESS_MEMBER", self.member.clone()),
            ("TRITON_STRESS_SERVERS", self.servers.join(",")),
            ("TRITON_STRESS_PROTOCOL", self.protocol.clone()),
            ("TRITON_STRESS_MODELS", self.models.join(",")),
            ("TRITON_STRESS_SEED", self.seed.to_string()),
            ("TRITON_STRESS_CONCURRENCY", self.concurrency.to_string()),
        ];
        if let Some(d) = self.duration_s {
            env.push(("TRITON_STRESS_DURATION_S", d.to_string()));
        }
        if let Some(r) = self.rate {
            env.push(("TRITON_STRESS_RATE", r.to_string()));
        }
        if let Some(ids) = self.correlation_ids {
            env.push(("TRITON_STRESS_CORRELATION_ID_FIRST", ids.first.to_string()));
            env.push(("TRITON_STRESS_CORRELATION_ID_COUNT", ids.count.to_string()));
        }
        env
    }
}

/// One line a foreign client writes on stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// The first line: which client implementation this is, and its version (they are part of
    /// the run's record and of the matrix's fingerprint).
    Hello(Hello),
    /// A test that passed: every answer it got was checked and right.
    Pass(Passed),
    /// A test that failed, in the client's words.
    Fail(Failed),
    /// A test the client did not run because a precondition blocked it.
    Skip(Skipped),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    /// The interface version the program speaks (must be [`INTERFACE`]).
    pub interface: u32,
    /// The client implementation, e.g. `tritonclient-python-grpc`.
    pub client: String,
    /// Its version, e.g. `2.51.0`.
    pub version: String,
}

impl Hello {
    /// `tritonclient-python-grpc 2.51.0`.
    pub fn label(&self) -> String {
        format!("{} {}", self.client, self.version)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Passed {
    /// The scenario, free-form (SLOs and known issues match it), e.g. `Load`.
    #[serde(deserialize_with = "scenario")]
    #[schemars(length(min = 1, max = MAX_NAME_CHARS), regex(pattern = NAME_PATTERN))]
    pub scenario: String,
    /// The model the test used ("" or absent: none, or several).
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "model"
    )]
    #[schemars(length(max = MAX_NAME_CHARS), regex(pattern = NAME_PATTERN))]
    pub model: String,
    /// The server it went to, as in the assignment's `servers`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server: String,
    /// The latency of each request the test sent, microseconds from when it was meant to
    /// leave (in open loop: its scheduled time) to its answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latencies_us: Vec<u64>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Failed {
    #[serde(deserialize_with = "scenario")]
    #[schemars(length(min = 1, max = MAX_NAME_CHARS), regex(pattern = NAME_PATTERN))]
    pub scenario: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "model"
    )]
    #[schemars(length(max = MAX_NAME_CHARS), regex(pattern = NAME_PATTERN))]
    pub model: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server: String,
    /// Latencies of the requests the test got answers to, as in `pass`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latencies_us: Vec<u64>,
    /// What kind of failure the client saw; classification uses it.
    pub error_kind: ErrorKind,
    /// What happened, e.g. `OUTPUT0[3]: expected 5, got 6` or the server's error text.
    pub message: String,
    /// What the client expected, when it checked an answer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub expected: String,
    /// The sequence's correlation id, for a sequence test.
    pub correlation_id: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Skipped {
    #[serde(deserialize_with = "scenario")]
    #[schemars(length(min = 1, max = MAX_NAME_CHARS), regex(pattern = NAME_PATTERN))]
    pub scenario: String,
}

/// A line of a client's stdout that interface 1 does not allow.
#[derive(Debug, thiserror::Error)]
#[error("line {line} is not a record of interface {INTERFACE} ({error}): {text}")]
pub struct BadLine {
    /// 1-based line number on the program's stdout.
    pub line: u64,
    /// The line, cut to 200 characters.
    pub text: String,
    pub error: String,
}

impl BadLine {
    /// The `line`th line, `text`, and why interface 1 does not allow it.
    pub fn new(line: u64, text: &str, error: impl Into<String>) -> BadLine {
        BadLine {
            line,
            text: text.chars().take(200).collect(),
            error: error.into(),
        }
    }
}

impl Record {
    /// Reads one line of stdout (the `line`th); a `hello` of another interface version is bad.
    pub fn parse(text: &str, line: u64) -> Result<Record, BadLine> {
        let bad = |error: String| BadLine::new(line, text, error);
        let record: Record = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if let Record::Hello(h) = &record
            && h.interface != INTERFACE
        {
            return Err(bad(format!(
                "the program speaks interface {}, the worker {INTERFACE}",
                h.interface
            )));
        }
        Ok(record)
    }
}

/// The JSON schema of a record line, as docs/clients.schema.json holds it.
pub fn record_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Record)).expect("a schema is JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_their_lines() {
        let records = [
            Record::Hello(Hello {
                interface: 1,
                client: "tritonclient-python-grpc".into(),
                version: "2.51.0".into(),
            }),
            Record::Pass(Passed {
                scenario: "Load".into(),
                model: "add_sub".into(),
                server: "127.0.0.1:8001".into(),
                latencies_us: vec![812, 900],
            }),
            Record::Fail(Failed {
                scenario: "Load".into(),
                model: "add_sub".into(),
                server: "127.0.0.1:8001".into(),
                latencies_us: vec![],
                error_kind: ErrorKind::WrongAnswer,
                message: "OUTPUT0[3]: expected 5, got 6".into(),
                expected: "5".into(),
                correlation_id: Some(7),
            }),
            Record::Skip(Skipped {
                scenario: "SequenceNoStart".into(),
            }),
        ];
        for (i, r) in records.iter().enumerate() {
            let line = serde_json::to_string(r).unwrap();
            assert!(!line.contains('\n'));
            assert_eq!(Record::parse(&line, i as u64 + 1).unwrap(), *r, "{line}");
        }
    }

    #[test]
    fn lines_outside_the_interface_are_bad_and_say_which() {
        for (text, error) in [
            ("hello world", "expected"),
            (r#"{"type":"pass"}"#, "missing field `scenario`"),
            (
                r#"{"type":"pass","scenario":"L","latency":3}"#,
                "unknown field `latency`",
            ),
            (
                r#"{"type":"fail","scenario":"L","message":"x"}"#,
                "missing field `error_kind`",
            ),
            (
                r#"{"type":"fail","scenario":"L","message":"x","error_kind":"oops"}"#,
                "unknown variant `oops`",
            ),
            (
                r#"{"type":"progress","scenario":"L"}"#,
                "unknown variant `progress`",
            ),
            (
                r#"{"type":"hello","interface":2,"client":"c","version":"1"}"#,
                "speaks interface 2",
            ),
            (r#"{"type":"skip","scenario":""}"#, "an empty scenario"),
            (
                r#"{"type":"pass","scenario":"Lo\nad"}"#,
                r#"the name "Lo\nad" holds a control character"#,
            ),
            (
                r#"{"type":"pass","scenario":"L","model":"add\u202e"}"#,
                "holds a control character",
            ),
            (
                &format!(r#"{{"type":"pass","scenario":"{}"}}"#, "S".repeat(129)),
                "is longer than 128 characters",
            ),
        ] {
            let bad = Record::parse(text, 4).expect_err(text);
            let said = bad.to_string();
            assert!(
                said.starts_with("line 4 is not a record of interface 1 ("),
                "{said}"
            );
            assert!(said.contains(error), "{text}: {said}");
        }
    }

    /// docs/clients.schema.json is the schema of [`Record`] as this code reads it
    /// (`UPDATE_SCHEMA=1 cargo test -p stress-common foreign` writes it anew).
    #[test]
    fn the_published_schema_is_the_one_the_worker_reads() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/clients.schema.json");
        let want = serde_json::to_string_pretty(&record_schema()).unwrap() + "\n";
        if std::env::var_os("UPDATE_SCHEMA").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} is stale: UPDATE_SCHEMA=1 cargo test -p stress-common foreign",
            path.display()
        );
    }

    #[test]
    fn the_assignment_is_in_the_environment_too() {
        let a = Assignment {
            interface: INTERFACE,
            member: "py-0".into(),
            servers: vec!["127.0.0.1:8001".into(), "127.0.0.1:9001".into()],
            protocol: "grpc".into(),
            models: vec!["add_sub".into()],
            duration_s: Some(15.0),
            seed: 3,
            concurrency: 2,
            rate: None,
            correlation_ids: Some(CorrelationIds {
                first: 1000,
                count: 500,
            }),
        };
        let env: std::collections::BTreeMap<_, _> = a.env().into_iter().collect();
        assert_eq!(
            env["TRITON_STRESS_SERVERS"],
            "127.0.0.1:8001,127.0.0.1:9001"
        );
        assert_eq!(env["TRITON_STRESS_DURATION_S"], "15");
        assert_eq!(env["TRITON_STRESS_CORRELATION_ID_FIRST"], "1000");
        assert!(!env.contains_key("TRITON_STRESS_RATE"));
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<Assignment>(&json).unwrap(), a);
    }
}
