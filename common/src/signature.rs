//! Failure signatures: when two failures are "the same failure". A signature is the failure's
//! scenario, model, [`ErrorKind`] and its message (what was expected and what came) with what
//! differs from one occurrence to the next taken out: numbers, correlation and request ids,
//! addresses, digests, times. Both sides compute it: the worker to bound what it records (the
//! first examples of each signature in full, then counts), the driver to judge and to keep a
//! history across runs.
//!
//! The normalization has a version ([`NORMALIZATION_VERSION`], part of every signature): when
//! it changes, earlier runs' signatures are another version and the history says it restarts,
//! instead of every failure silently turning "new".

use regex::Regex;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::LazyLock;

/// The version of [`normalize`]; bump it with any change of what it takes out.
pub const NORMALIZATION_VERSION: u32 = 1;

/// A normalized message is cut to this many characters.
const MAX_MESSAGE: usize = 240;

/// What kind of error a failure is, from what the client saw.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The server answered, and the answer failed a check (a wrong output, shape, datatype, an
    /// answer missing or extra).
    WrongAnswer,
    /// The server refused the request as invalid (gRPC INVALID_ARGUMENT, NOT_FOUND,
    /// FAILED_PRECONDITION, ...; HTTP 4xx).
    Rejected,
    /// The server answered with an error of its own (gRPC INTERNAL, UNKNOWN; HTTP 5xx).
    ServerError,
    /// The server said it cannot serve now (gRPC UNAVAILABLE, RESOURCE_EXHAUSTED; HTTP 503, 429).
    Unavailable,
    /// No answer in time (the client's deadline, or DEADLINE_EXCEEDED).
    Timeout,
    /// The connection could not be made or broke.
    Transport,
    /// The answer did not follow the protocol.
    Protocol,
    /// The test could not run for a reason of the worker's own (a child process that did not
    /// start, a request prepared for the other protocol).
    Harness,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 8] = [
        ErrorKind::WrongAnswer,
        ErrorKind::Rejected,
        ErrorKind::ServerError,
        ErrorKind::Unavailable,
        ErrorKind::Timeout,
        ErrorKind::Transport,
        ErrorKind::Protocol,
        ErrorKind::Harness,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::WrongAnswer => "wrong_answer",
            ErrorKind::Rejected => "rejected",
            ErrorKind::ServerError => "server_error",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Transport => "transport",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Harness => "harness",
        }
    }

    pub fn parse(text: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// The kind of a failure from what the client saw (`actual`). The worker writes a client
    /// error as its text, whose prefix names it (`deadline exceeded: `, `server error (CODE): `,
    /// `transport error: `, `protocol error: `; see the worker's `ClientError`); anything else is
    /// an answer that failed its check.
    pub fn of(actual: &str) -> ErrorKind {
        const MARKERS: [&str; 5] = [
            "deadline exceeded",
            "server error (",
            "transport error",
            "protocol error",
            "a request prepared for another protocol",
        ];
        let first = MARKERS
            .iter()
            .filter_map(|m| actual.find(m).map(|at| (at, *m)))
            .min();
        match first {
            Some((_, "deadline exceeded")) => ErrorKind::Timeout,
            Some((at, "server error (")) => {
                let code = actual[at + "server error (".len()..]
                    .split(')')
                    .next()
                    .unwrap_or_default();
                ErrorKind::of_status(code)
            }
            Some((_, "transport error")) => ErrorKind::Transport,
            Some((_, "protocol error")) => ErrorKind::Protocol,
            Some(_) => ErrorKind::Harness,
            None => ErrorKind::WrongAnswer,
        }
    }

    /// The kind of a server's error status: a gRPC code by its name (`InvalidArgument`,
    /// `INVALID_ARGUMENT`) or number, or an HTTP status.
    pub fn of_status(code: &str) -> ErrorKind {
        let code = code.trim();
        let name: String = code
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        match name.as_str() {
            "invalidargument" | "notfound" | "failedprecondition" | "outofrange"
            | "unimplemented" | "alreadyexists" | "permissiondenied" | "unauthenticated"
            | "cancelled" | "aborted" => ErrorKind::Rejected,
            "unavailable" | "resourceexhausted" => ErrorKind::Unavailable,
            "deadlineexceeded" => ErrorKind::Timeout,
            _ => match code.parse::<u16>() {
                Ok(429 | 503) => ErrorKind::Unavailable,
                Ok(504 | 408) => ErrorKind::Timeout,
                Ok(400..=499) => ErrorKind::Rejected,
                _ => ErrorKind::ServerError,
            },
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a failure's fault lies, as the driver judged it with its evidence.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The server misbehaved: a wrong answer, an error of its own, a contradiction of an answer
    /// it gave earlier, a server that died.
    Server,
    /// The client misbehaved: a request the server rightly refused (a sequence without START).
    Client,
    /// What both run on: a pod OOMKilled or evicted, a node lost, the network.
    Infrastructure,
    /// The harness itself: the driver or a worker of ours that died or lost the store.
    Harness,
    /// The test's setup: the matrix asks what the worker, its machine or the server's models
    /// cannot do (a decoupled model over HTTP, a perf_analyzer that is not there, a capacity mix
    /// the worker did not plan), so the test never ran. Nobody's bug at run time.
    Setup,
    /// A fault the run injected on purpose.
    Injected,
}

impl FailureClass {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Server => "server",
            FailureClass::Client => "client",
            FailureClass::Infrastructure => "infrastructure",
            FailureClass::Harness => "harness",
            FailureClass::Setup => "setup",
            FailureClass::Injected => "injected",
        }
    }
}

impl fmt::Display for FailureClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What makes failures the same failure.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Signature {
    /// The [`NORMALIZATION_VERSION`] it was made with.
    pub version: u32,
    pub scenario: String,
    pub model: String,
    pub error_kind: ErrorKind,
    /// `expected …, got …`, normalized.
    pub message: String,
}

impl Signature {
    /// The signature of a failure of `scenario` on `model`: what was `expected`, what came
    /// (`actual`). `FailureRecord::signature` is the usual way in.
    pub fn new(scenario: &str, model: &str, expected: &str, actual: &str) -> Signature {
        Self::of_kind(scenario, model, expected, actual, None)
    }

    /// [`Signature::new`] with the kind the client typed (None: judged from `actual`'s words,
    /// [`ErrorKind::of`]).
    pub fn of_kind(
        scenario: &str,
        model: &str,
        expected: &str,
        actual: &str,
        kind: Option<ErrorKind>,
    ) -> Signature {
        Signature {
            version: NORMALIZATION_VERSION,
            scenario: scenario.into(),
            model: model.into(),
            error_kind: kind.unwrap_or_else(|| ErrorKind::of(actual)),
            message: normalize(&format!("expected {expected}, got {actual}")),
        }
    }

    /// `sig1-` and 12 hex digits of a hash of the signature: stable across runs, builds and
    /// machines for the same signature.
    pub fn id(&self) -> String {
        let text = format!(
            "{}\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}",
            self.version, self.scenario, self.model, self.error_kind, self.message
        );
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in text.as_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("sig{}-{:012x}", self.version, h >> 16)
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.scenario)?;
        if !self.model.is_empty() {
            write!(f, "model {} ", self.model)?;
        }
        write!(f, "[{}]: {}", self.error_kind, self.message)
    }
}

/// One signature's failures on one worker, as the worker counts them (cumulative over its run;
/// it records the first [`SignatureCount::EXAMPLES`] in full).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignatureCount {
    pub signature: Signature,
    pub count: u64,
    pub first_at_ms: i64,
    pub last_at_ms: i64,
}

impl SignatureCount {
    /// Failures of one signature a worker records in full; the rest are counted.
    pub const EXAMPLES: u64 = 5;
    /// Signatures a worker counts; failures of further signatures are recorded in full (the
    /// store caps records per member) but not counted here.
    pub const MAX_SIGNATURES: usize = 1000;
}

macro_rules! re {
    ($name:ident, $pattern:literal) => {
        static $name: LazyLock<Regex> =
            LazyLock::new(|| Regex::new($pattern).expect("a valid pattern"));
    };
}

re!(
    UUID,
    r"(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
);
re!(URL, r"\b[a-z][a-z0-9+.-]*://[^\s,;'\x22)\]]+");
re!(
    TIME,
    r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?\b"
);
re!(
    ADDRESS,
    r"\[[0-9a-fA-F:]+\](:\d+)?|\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b|\b(localhost|[a-z0-9-]+(\.[a-z0-9-]+)+):\d+\b"
);
re!(
    HEX,
    r"\b(0x[0-9a-fA-F]+|[0-9a-fA-F]*[0-9][0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*|[0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*[0-9][0-9a-fA-F]*)\b"
);
// A number that is not part of a name (`resnet50`, `model_2` keep theirs).
re!(NUMBER, r"(^|[^A-Za-z0-9_.])-?\d+(\.\d+)?([eE][-+]?\d+)?");
re!(NUMBERS, r"<n>(\s*,\s*<n>)+");
re!(SPACE, r"\s+");

/// A failure's text with what differs between occurrences taken out (version
/// [`NORMALIZATION_VERSION`]): UUIDs, URLs, date-times, addresses, digests and hex ids, and
/// numbers (a list of them becomes one), whitespace collapsed, at most 240 characters.
pub fn normalize(text: &str) -> String {
    let text = UUID.replace_all(text, "<uuid>");
    let text = URL.replace_all(&text, "<url>");
    let text = TIME.replace_all(&text, "<time>");
    let text = ADDRESS.replace_all(&text, "<addr>");
    let text = HEX.replace_all(&text, |c: &regex::Captures| {
        // A short hex-looking word (`ab12`) may be a word; ids and digests are long.
        if c[0].len() >= 8 || c[0].starts_with("0x") {
            "<hex>".to_string()
        } else {
            c[0].to_string()
        }
    });
    let text = NUMBER.replace_all(&text, "${1}<n>");
    let text = NUMBERS.replace_all(&text, "<n>…");
    let text = SPACE.replace_all(text.trim(), " ");
    text.chars().take(MAX_MESSAGE).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_differs_between_occurrences_is_taken_out() {
        let a = normalize(
            "server error (InvalidArgument): inference request for sequence 1048577 to model \
             'sequence_nobatch' must specify the START flag on the first request of the sequence",
        );
        let b = normalize(
            "server error (InvalidArgument): inference request for sequence 2097313 to model \
             'sequence_nobatch' must specify the START flag on the first request of the sequence",
        );
        assert_eq!(a, b);
        assert!(
            a.contains("sequence <n> to model 'sequence_nobatch'"),
            "{a}"
        );
        assert_eq!(
            normalize("transport error: 10.244.0.17:8001: connection refused after 3.5 s"),
            "transport error: <addr>: connection refused after <n> s"
        );
        assert_eq!(
            normalize("OUTPUT0 [3, 5, 7, 9] vs [4, 6, 8, 10]"),
            normalize("OUTPUT0 [11, 13] vs [12, 14]"),
            "lists of numbers of any length are one"
        );
        assert_eq!(
            normalize(
                "request 0x7f3a at 2026-11-27T06:15:12.345Z id 123e4567-e89b-12d3-a456-426614174000 digest 9f86d081884c7d65"
            ),
            "request <hex> at <time> id <uuid> digest <hex>"
        );
        assert_eq!(
            normalize("model resnet50 v2_1 from http://host:8000/v2/models/x?y=1 ok"),
            "model resnet50 v2_1 from <url> ok",
            "digits in names stay"
        );
        assert!(normalize(&"x".repeat(1000)).chars().count() <= 240);
    }

    #[test]
    fn the_error_kind_comes_from_the_client_error_s_text() {
        let cases = [
            ("deadline exceeded: after 100ms", ErrorKind::Timeout),
            (
                "server error (InvalidArgument): must specify the START flag",
                ErrorKind::Rejected,
            ),
            (
                "server error (Unavailable): shutting down",
                ErrorKind::Unavailable,
            ),
            (
                "server error (Internal): a stub died",
                ErrorKind::ServerError,
            ),
            ("server error (400): bad request", ErrorKind::Rejected),
            ("server error (503): busy", ErrorKind::Unavailable),
            ("server error (500): oops", ErrorKind::ServerError),
            ("transport error: connection reset", ErrorKind::Transport),
            ("protocol error: no status", ErrorKind::Protocol),
            ("OUTPUT0 [4, 6]", ErrorKind::WrongAnswer),
            (
                "a stream of 3 answers: transport error: reset",
                ErrorKind::Transport,
            ),
        ];
        for (actual, kind) in cases {
            assert_eq!(ErrorKind::of(actual), kind, "{actual}");
            assert_eq!(ErrorKind::parse(kind.as_str()), Some(kind));
        }
    }

    #[test]
    fn the_same_failure_has_the_same_id_and_another_does_not() {
        let a = Signature::new(
            "SequenceValid",
            "sequence_nobatch",
            "step 2 of 12 answered",
            "server error (InvalidArgument): sequence 1048577 must specify the START flag",
        );
        let b = Signature::new(
            "SequenceValid",
            "sequence_nobatch",
            "step 7 of 30 answered",
            "server error (InvalidArgument): sequence 99 must specify the START flag",
        );
        assert_eq!(a, b);
        assert_eq!(a.id(), b.id());
        assert!(
            a.id().starts_with("sig1-") && a.id().len() == 17,
            "{}",
            a.id()
        );
        assert_eq!(a.error_kind, ErrorKind::Rejected);
        let other_model = Signature::new(
            "SequenceValid",
            "sequence_batch",
            "step 2 of 12 answered",
            "server error (InvalidArgument): sequence 5 must specify the START flag",
        );
        assert_ne!(a.id(), other_model.id());
        let wrong = Signature::new("Load", "add_sub", "OUTPUT0 [3]", "OUTPUT0 [4]");
        assert_eq!(wrong.error_kind, ErrorKind::WrongAnswer);
        assert_ne!(wrong.id(), a.id());
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<Signature>(&json).unwrap(), a);
        assert!(json.contains("\"error_kind\":\"rejected\""), "{json}");
    }
}
