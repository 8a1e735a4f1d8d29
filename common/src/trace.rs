//! Traced requests across client and server: the W3C trace context a worker sends on a sampled
//! share of its requests (<https://www.w3.org/TR/trace-context/>), the client's span of each
//! (what the worker saw), and the server's spans as Triton exports them over OTLP. The worker
//! writes client spans with its snapshots, the driver's OTLP receiver writes server spans,
//! and the report joins them by trace id (`driver/src/report/spans.rs`).

use serde::{Deserialize, Serialize};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The share of requests a client traces, in `[0, 1]`: parsed once, so a value out of range
/// cannot exist downstream.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct TraceShare(f64);

/// A trace share outside `[0, 1]`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("a share of requests is from 0 to 1, not {0}")]
pub struct ShareOutOfRange(pub f64);

impl TryFrom<f64> for TraceShare {
    type Error = ShareOutOfRange;
    fn try_from(v: f64) -> Result<Self, Self::Error> {
        if (0.0..=1.0).contains(&v) {
            Ok(Self(v))
        } else {
            Err(ShareOutOfRange(v))
        }
    }
}

impl From<TraceShare> for f64 {
    fn from(s: TraceShare) -> f64 {
        s.0
    }
}

impl std::str::FromStr for TraceShare {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let v: f64 = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
        Self::try_from(v).map_err(|e| e.to_string())
    }
}

impl std::fmt::Display for TraceShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl TraceShare {
    pub fn get(self) -> f64 {
        self.0
    }

    /// Whether request number `i` of a stream seeded with `seed` is traced: a draw that is a
    /// pure function of both (SplitMix64 of their mix), so a run repeated with its seed traces
    /// the same requests and no shared random state sits on the request path.
    pub fn samples(self, seed: u64, i: u64) -> bool {
        if self.0 <= 0.0 {
            return false;
        }
        let draw = splitmix64(seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        // The top 53 bits as a uniform number in [0, 1).
        ((draw >> 11) as f64 / (1u64 << 53) as f64) < self.0
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One traced request's context: its trace id and the client span's id, the parent of the
/// server's first span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    pub trace_id: u128,
    pub span_id: u64,
}

impl TraceContext {
    /// A fresh context from random bits (ids are never all zero: W3C calls that invalid).
    pub fn random(rng: &mut impl rand::Rng) -> Self {
        Self {
            trace_id: rng.random::<u128>().max(1),
            span_id: rng.random::<u64>().max(1),
        }
    }

    /// The `traceparent` header: version 00, the ids in lowercase hex, flags 01 (sampled).
    pub fn traceparent(&self) -> String {
        format!("00-{:032x}-{:016x}-01", self.trace_id, self.span_id)
    }

    /// Reads a version-00 `traceparent`; `None` for anything else.
    pub fn from_traceparent(header: &str) -> Option<Self> {
        let mut parts = header.split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if version != "00" || parts.next().is_some() || !is_hex(flags, 2) {
            return None;
        }
        let trace_id = u128::from_str_radix(trace, 16)
            .ok()
            .filter(|_| is_hex(trace, 32))?;
        let span_id = u64::from_str_radix(span, 16)
            .ok()
            .filter(|_| is_hex(span, 16))?;
        (trace_id != 0 && span_id != 0).then_some(Self { trace_id, span_id })
    }

    /// The trace id as OTLP/JSON and the store write it: 32 lowercase hex digits.
    pub fn trace_hex(&self) -> String {
        format!("{:032x}", self.trace_id)
    }

    /// The span id as OTLP/JSON and the store write it: 16 lowercase hex digits.
    pub fn span_hex(&self) -> String {
        format!("{:016x}", self.span_id)
    }
}

/// Exactly `digits` lowercase hex digits, as W3C writes ids.
fn is_hex(s: &str, digits: usize) -> bool {
    s.len() == digits
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Instants as Unix nanoseconds: the wall clock read once, monotonic time after, so a clock
/// step during a run moves no span (OTLP's timestamps are Unix nanoseconds).
#[derive(Debug, Clone, Copy)]
pub struct WallClock {
    instant: Instant,
    unix_ns: i64,
}

impl WallClock {
    pub fn now() -> Self {
        let unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0);
        Self {
            instant: Instant::now(),
            unix_ns,
        }
    }

    /// `at` in Unix nanoseconds.
    pub fn unix_ns(&self, at: Instant) -> i64 {
        match at.checked_duration_since(self.instant) {
            Some(after) => self.unix_ns + after.as_nanos() as i64,
            None => self.unix_ns - self.instant.duration_since(at).as_nanos() as i64,
        }
    }
}

/// A traced request as its client saw it, times in Unix nanoseconds of the client's clock.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientSpan {
    /// 32 lowercase hex digits ([`TraceContext::trace_hex`]).
    pub trace_id: String,
    /// The client span's id, the parent of the server's first span: 16 hex digits.
    pub span_id: String,
    pub scenario: String,
    pub model: String,
    /// The server address the request went to, as the worker's `--servers` gave it.
    pub server: String,
    /// When the request was meant to leave (an open loop's schedule; in closed loop, when
    /// its sender was free to send it).
    pub intended_ns: i64,
    /// When its bytes were handed to the kernel, where the client knows (the worker's lean
    /// gRPC path), else when the client began to send it.
    pub sent_ns: i64,
    /// When its answer (or its error) was in.
    pub answered_ns: i64,
    /// When its answer reached this host: the kernel's receive time of the read that brought
    /// it, where the client has one (the worker's lean gRPC path). From there to `answered_ns`
    /// the answer waited for the client (a client short of CPU reads late); without it that
    /// wait cannot be told from the wire's.
    pub received_ns: Option<i64>,
    pub ok: bool,
}

/// One server span as Triton exported it (OTLP), times in Unix nanoseconds of the server's
/// clock. Triton's three spans of a request: `InferRequest` (the frontend: HTTP_RECV_START ...
/// HTTP_SEND_END or GRPC_WAITREAD_START ... GRPC_SEND_END; its parent is the client's span),
/// the model's (named after the model: REQUEST_START, QUEUE_START, REQUEST_END) and `compute`
/// (COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerSpan {
    /// The server member that exported it (the receiver's path says which), or `external`.
    pub server: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    pub start_ns: i64,
    pub end_ns: i64,
    pub events: Vec<SpanEvent>,
}

/// A named instant inside a span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpanEvent {
    pub name: String,
    pub at_ns: i64,
}

impl ServerSpan {
    /// The time of its first event named `name`.
    pub fn event(&self, name: &str) -> Option<i64> {
        self.events.iter().find(|e| e.name == name).map(|e| e.at_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips_and_reads_as_w3c_writes_it() {
        let context = TraceContext {
            trace_id: 0x0af7651916cd43dd8448eb211c80319c,
            span_id: 0xb7ad6b7169203331,
        };
        let header = context.traceparent();
        assert_eq!(
            header,
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
        assert_eq!(TraceContext::from_traceparent(&header), Some(context));
        assert_eq!(context.trace_hex(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(context.span_hex(), "b7ad6b7169203331");
    }

    #[test]
    fn a_bad_traceparent_is_refused() {
        for bad in [
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
        ] {
            assert_eq!(TraceContext::from_traceparent(bad), None, "{bad}");
        }
    }

    #[test]
    fn random_contexts_differ_and_are_never_zero() {
        let mut rng = rand::rng();
        let a = TraceContext::random(&mut rng);
        let b = TraceContext::random(&mut rng);
        assert_ne!(a, b);
        assert!(a.trace_id != 0 && a.span_id != 0);
    }

    #[test]
    fn a_share_is_from_zero_to_one() {
        assert!(TraceShare::try_from(-0.1).is_err());
        assert!(TraceShare::try_from(1.5).is_err());
        assert!(TraceShare::try_from(f64::NAN).is_err());
        assert!("0.01".parse::<TraceShare>().is_ok());
        assert!("2".parse::<TraceShare>().is_err());
        assert!(serde_json::from_str::<TraceShare>("1.01").is_err());
        assert_eq!(
            serde_json::from_str::<TraceShare>("0.5").unwrap().get(),
            0.5
        );
    }

    #[test]
    fn a_share_samples_about_its_share_the_same_way_for_the_same_seed() {
        let share = TraceShare::try_from(0.01).unwrap();
        let traced = (0..100_000).filter(|&i| share.samples(7, i)).count();
        // Binomial(100000, 0.01): mean 1000, sd ~31.5; six sd either side.
        assert!((810..=1190).contains(&traced), "{traced}");
        let again = (0..100_000).filter(|&i| share.samples(7, i)).count();
        assert_eq!(traced, again);
        let other_seed = (0..1000).filter(|&i| share.samples(8, i) != share.samples(7, i));
        assert!(other_seed.count() > 0);
        let none = TraceShare::try_from(0.0).unwrap();
        assert!((0..10_000).all(|i| !none.samples(7, i)));
        let all = TraceShare::try_from(1.0).unwrap();
        assert!((0..10_000).all(|i| all.samples(7, i)));
    }

    #[test]
    fn the_wall_clock_maps_instants_both_sides_of_its_reading() {
        let before = Instant::now();
        let clock = WallClock::now();
        let after = clock.instant + std::time::Duration::from_millis(5);
        assert_eq!(clock.unix_ns(after) - clock.unix_ns, 5_000_000);
        assert!(clock.unix_ns(before) <= clock.unix_ns);
    }

    #[test]
    fn spans_round_trip_through_json() {
        let span = ServerSpan {
            server: "r2-51-0".into(),
            trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
            span_id: "8b6862c3bdaa2bb3".into(),
            parent_span_id: "b7ad6b7169203331".into(),
            name: "InferRequest".into(),
            start_ns: 1,
            end_ns: 9,
            events: vec![SpanEvent {
                name: "HTTP_RECV_START".into(),
                at_ns: 2,
            }],
        };
        let back: ServerSpan =
            serde_json::from_str(&serde_json::to_string(&span).unwrap()).unwrap();
        assert_eq!(back, span);
        assert_eq!(back.event("HTTP_RECV_START"), Some(2));
        assert_eq!(back.event("HTTP_SEND_END"), None);
    }
}
