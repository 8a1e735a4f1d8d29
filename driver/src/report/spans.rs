//! Traced requests joined across client and server (issue 51): each traced request's time,
//! from when it was meant to leave to its answer, split into parts that add up exactly — the
//! client's own delay, the network, Triton's request handling, the queue, and compute's input,
//! infer and output — with each server's clock offset estimated from the requests themselves;
//! and per (scenario, model) of the run's tail (its slowest traced requests,
//! `Store::traced_tail`), the share of the tail's time each part took, and its slowest
//! requests as waterfalls.
//!
//! A request's server spans are Triton's three (`InferRequest`, whose parent is the client's
//! span; the model's, whose parent is `InferRequest`; `compute`, whose parent is the model's),
//! and for an ensemble its steps' model spans between the model's and each step's `compute`:
//! each step's compute is split as a model's is, and the time between one step's compute and
//! the next's counts as queue (the ensemble's scheduling and the next step's queue).
//! The request is in at `HTTP_RECV_START` or `GRPC_WAITREAD_END` (never `GRPC_WAITREAD_START`:
//! that is when Triton posted the read, often seconds before the request was sent) and its
//! answer out at `HTTP_SEND_END` or `GRPC_SEND_END`. Spans that never arrived are counted, not
//! guessed: a request without them is left out of the shares. Pure: the store read is `facts`'.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use stress_common::store::TracedTail;
use stress_common::trace::{ClientSpan, ServerSpan};

/// The share of each (scenario, model)'s traced requests the report splits: those above the
/// traced p99.
pub const TAIL_SHARE: f64 = 0.01;
/// How many of each (scenario, model)'s slowest traced requests are drawn as waterfalls.
pub const SLOWEST: usize = 5;

/// A part of a request's time, from its intended send to its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// The client's own delay: from when the request was meant to leave to when the client
    /// began to send it, and, where the kernel's receive time of the answer is known, from
    /// then to the answer in the client's hands (a client short of CPU reads late).
    Client,
    /// From the send to the server's receipt.
    TransportIn,
    /// Triton's request handling: from the receipt to the queue, and from compute's end to the
    /// answer out.
    Handling,
    /// In the scheduler's queue, up to compute's start.
    Queue,
    ComputeInput,
    ComputeInfer,
    ComputeOutput,
    /// From the server's last byte out to the answer's arrival on the client's host (its
    /// kernel's receive time); without that time, to the answer in the client's hands, which
    /// then holds a client too busy to read its answer at once as well as the wire back.
    TransportOut,
}

impl Part {
    pub const ALL: [Part; 8] = [
        Part::Client,
        Part::TransportIn,
        Part::Handling,
        Part::Queue,
        Part::ComputeInput,
        Part::ComputeInfer,
        Part::ComputeOutput,
        Part::TransportOut,
    ];

    /// Its name as people read it.
    pub fn as_str(self) -> &'static str {
        match self {
            Part::Client => "client",
            Part::TransportIn => "transport in",
            Part::TransportOut => "transport out",
            Part::Handling => "handling",
            Part::Queue => "queue",
            Part::ComputeInput => "compute input",
            Part::ComputeInfer => "compute infer",
            Part::ComputeOutput => "compute output",
        }
    }
}

/// One value per part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Parts<T> {
    pub client: T,
    pub transport_in: T,
    pub handling: T,
    pub queue: T,
    pub compute_input: T,
    pub compute_infer: T,
    pub compute_output: T,
    pub transport_out: T,
}

impl<T: Copy> Parts<T> {
    pub fn get(&self, part: Part) -> T {
        *self.field(part)
    }

    fn field(&self, part: Part) -> &T {
        match part {
            Part::Client => &self.client,
            Part::TransportIn => &self.transport_in,
            Part::TransportOut => &self.transport_out,
            Part::Handling => &self.handling,
            Part::Queue => &self.queue,
            Part::ComputeInput => &self.compute_input,
            Part::ComputeInfer => &self.compute_infer,
            Part::ComputeOutput => &self.compute_output,
        }
    }

    fn field_mut(&mut self, part: Part) -> &mut T {
        match part {
            Part::Client => &mut self.client,
            Part::TransportIn => &mut self.transport_in,
            Part::TransportOut => &mut self.transport_out,
            Part::Handling => &mut self.handling,
            Part::Queue => &mut self.queue,
            Part::ComputeInput => &mut self.compute_input,
            Part::ComputeInfer => &mut self.compute_infer,
            Part::ComputeOutput => &mut self.compute_output,
        }
    }
}

/// A traced request's instants on its server, in the server's clock (Unix ns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTimes {
    /// The request in: `HTTP_RECV_START`, or `GRPC_WAITREAD_END`.
    pub server_in: i64,
    pub queue_start: i64,
    /// Its model's compute, or an ensemble's steps' in the order they started: at least one.
    pub computes: Vec<ComputeTimes>,
    /// The answer out: `HTTP_SEND_END`, or `GRPC_SEND_END`.
    pub server_out: i64,
}

/// One `compute` span's instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeTimes {
    pub start: i64,
    pub input_end: i64,
    pub output_start: i64,
    pub end: i64,
}

impl ComputeTimes {
    fn of(span: &ServerSpan) -> Result<ComputeTimes, Unjoined> {
        let at = |name: &'static str| span.event(name).ok_or(Unjoined::Partial(name));
        Ok(ComputeTimes {
            start: at("COMPUTE_START")?,
            input_end: at("COMPUTE_INPUT_END")?,
            output_start: at("COMPUTE_OUTPUT_START")?,
            end: at("COMPUTE_END")?,
        })
    }
}

/// Why a request's time is not split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unjoined {
    /// No server span of its trace arrived.
    NoSpans,
    /// Some did, but not what the split needs (this one).
    Partial(&'static str),
}

impl Unjoined {
    pub fn describe(&self) -> String {
        match self {
            Unjoined::NoSpans => "server spans not received".into(),
            Unjoined::Partial(what) => format!("partial server spans: {what}"),
        }
    }
}

/// A traced request's server spans, found from its client span: the `InferRequest` span whose
/// parent is the client's span, the model's span under it, `compute` under that (an
/// ensemble's: under its steps' spans). `spans` are its trace's. Returns the server that
/// exported them and its times.
pub fn server_times<'a>(
    client: &ClientSpan,
    spans: &[&'a ServerSpan],
) -> Result<(&'a str, ServerTimes), Unjoined> {
    if spans.is_empty() {
        return Err(Unjoined::NoSpans);
    }
    let child_of = |parent: &str| children(spans, parent.to_string());
    let infer = child_of(&client.span_id)
        .find(|s| s.name == "InferRequest")
        .ok_or(Unjoined::Partial("no InferRequest span under the client's"))?;
    let server_in = infer
        .event("HTTP_RECV_START")
        .or_else(|| infer.event("GRPC_WAITREAD_END"))
        .ok_or(Unjoined::Partial("InferRequest without its receipt"))?;
    let server_out = infer
        .event("HTTP_SEND_END")
        .or_else(|| infer.event("GRPC_SEND_END"))
        .ok_or(Unjoined::Partial("InferRequest without its send's end"))?;
    // The model's span is named after the model; any child that queued will do.
    let model = child_of(&infer.span_id)
        .filter(|s| s.event("QUEUE_START").is_some())
        .min_by_key(|s| s.name != client.model)
        .ok_or(Unjoined::Partial("no model span with QUEUE_START"))?;
    let mut computes = computes_under(spans, model)
        .into_iter()
        .map(ComputeTimes::of)
        .collect::<Result<Vec<_>, _>>()?;
    if computes.is_empty() {
        return Err(Unjoined::Partial("no compute span"));
    }
    computes.sort_by_key(|c| c.start);
    let times = ServerTimes {
        server_in,
        queue_start: model.event("QUEUE_START").unwrap_or(server_in),
        computes,
        server_out,
    };
    Ok((infer.server.as_str(), times))
}

/// The `compute` spans under `model`: its own, or an ensemble's steps' (found through their
/// model spans, never inside a compute: a model that calls others from its compute, as a
/// python BLS model does, is one compute).
fn computes_under<'a>(spans: &[&'a ServerSpan], model: &ServerSpan) -> Vec<&'a ServerSpan> {
    let mut found = Vec::new();
    let mut parents = vec![model.span_id.clone()];
    while let Some(parent) = parents.pop() {
        for child in children(spans, parent) {
            if child.name == "compute" {
                found.push(child);
            } else {
                parents.push(child.span_id.clone());
            }
        }
    }
    found
}

/// The spans of `spans` whose parent is `parent`.
fn children<'a, 'b>(
    spans: &'b [&'a ServerSpan],
    parent: String,
) -> impl Iterator<Item = &'a ServerSpan> + 'b {
    spans
        .iter()
        .copied()
        .filter(move |s| s.parent_span_id.eq_ignore_ascii_case(&parent))
}

/// A server's clock offset from the clients' (server − client), estimated from the requests
/// it answered: each bounds it within `[server out − answered, server in − sent]` (the
/// request was in after it was sent, and out before it was answered).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockOffset {
    pub server: String,
    pub offset_ns: i64,
    /// Half the width of what the requests allow (NTP-like); when they disagree, half the
    /// spread of their midpoints.
    pub bound_ns: i64,
    pub requests: u64,
    /// Whether every request's bounds agree (their intersection is not empty): the offset is
    /// then its midpoint, else the median of the requests' midpoints.
    pub consistent: bool,
}

/// The request's bounds on its server's clock offset: (lowest, highest).
pub fn offset_bounds(client: &ClientSpan, times: &ServerTimes) -> (i64, i64) {
    (
        times.server_out - received(client),
        times.server_in - client.sent_ns,
    )
}

/// When the answer reached the client's host: the kernel's receive time where known, else
/// when the client had it.
fn received(client: &ClientSpan) -> i64 {
    client.received_ns.unwrap_or(client.answered_ns)
}

/// `server`'s offset from its requests' bounds (at least one).
pub fn clock_offset(server: &str, bounds: &[(i64, i64)]) -> ClockOffset {
    let lo = bounds.iter().map(|b| b.0).max().unwrap_or(0);
    let hi = bounds.iter().map(|b| b.1).min().unwrap_or(0);
    let (offset_ns, bound_ns, consistent) = if lo <= hi {
        (midpoint(lo, hi), (hi - lo).div_euclid(2), true)
    } else {
        let mut mids: Vec<i64> = bounds.iter().map(|&(l, h)| midpoint(l, h)).collect();
        mids.sort_unstable();
        let n = mids.len();
        let median = midpoint(mids[(n - 1) / 2], mids[n / 2]);
        (median, (mids[n - 1] - mids[0]).div_euclid(2), false)
    };
    ClockOffset {
        server: server.to_string(),
        offset_ns,
        bound_ns,
        requests: bounds.len() as u64,
        consistent,
    }
}

/// Halfway from `a` to `b`, rounded down (the same whatever both are shifted by).
fn midpoint(a: i64, b: i64) -> i64 {
    a + (b - a).div_euclid(2)
}

/// A request's time in order, in the client's clock: from `start` (its intended send), each
/// stretch's part and where it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boundaries {
    pub start: i64,
    pub ends: Vec<(Part, i64)>,
}

impl Boundaries {
    /// From the intended send to the answer.
    pub fn total(&self) -> i64 {
        self.ends.last().map_or(self.start, |e| e.1) - self.start
    }

    /// Each stretch: its part, start and end.
    fn stretches(&self) -> impl Iterator<Item = (Part, i64, i64)> + '_ {
        let starts = std::iter::once(self.start).chain(self.ends.iter().map(|e| e.1));
        self.ends
            .iter()
            .zip(starts)
            .map(|(&(part, end), start)| (part, start, end))
    }
}

/// A request's boundaries in the client's clock (the server's moved by `offset_ns`): intended,
/// sent, server in, QUEUE_START, then each compute's COMPUTE_START, COMPUTE_INPUT_END,
/// COMPUTE_OUTPUT_START and COMPUTE_END, server out, received, answered. Each is no earlier
/// than the one before and no later than the answer: no part is ever negative, and they add up
/// to the time from the intended send to the answer.
pub fn boundaries(client: &ClientSpan, times: &ServerTimes, offset_ns: i64) -> Boundaries {
    let server = |t: i64| t - offset_ns;
    let mut raw = vec![
        (Part::Client, client.sent_ns),
        (Part::TransportIn, server(times.server_in)),
        (Part::Handling, server(times.queue_start)),
    ];
    for c in &times.computes {
        raw.extend([
            (Part::Queue, server(c.start)),
            (Part::ComputeInput, server(c.input_end)),
            (Part::ComputeInfer, server(c.output_start)),
            (Part::ComputeOutput, server(c.end)),
        ]);
    }
    raw.extend([
        (Part::Handling, server(times.server_out)),
        (Part::TransportOut, received(client)),
    ]);
    let start = client.intended_ns;
    let end = client.answered_ns.max(start);
    let mut at = start;
    let mut ends: Vec<(Part, i64)> = raw
        .into_iter()
        .map(|(part, t)| {
            at = t.clamp(at, end);
            (part, at)
        })
        .collect();
    ends.push((Part::Client, end));
    Boundaries { start, ends }
}

/// Each part's time (ns) between `boundaries`.
pub fn parts(boundaries: &Boundaries) -> Parts<i64> {
    let mut parts = Parts::default();
    for (part, start, end) in boundaries.stretches() {
        *parts.field_mut(part) += end - start;
    }
    parts
}

/// A stretch of a request's waterfall, from its intended send (µs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    pub part: Part,
    pub start_us: f64,
    pub length_us: f64,
}

/// One of the slowest traced requests, as a waterfall.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waterfall {
    pub trace_id: String,
    /// The server member whose spans these are; the address the client sent to when none came.
    pub server: String,
    pub ok: bool,
    /// From the intended send to the answer.
    pub total_us: f64,
    /// Its stretches in time order (those of no length left out); empty when not split.
    pub segments: Vec<Segment>,
    /// Why it is not split (None: it is).
    pub unsplit: Option<String>,
}

impl Waterfall {
    /// The time (µs) its stretches of `part` took: 0 (never −0, which `sum` of no floats
    /// is, and the report would print as "-0.00") when it has none.
    pub fn part_us(&self, part: Part) -> f64 {
        self.segments
            .iter()
            .filter(|s| s.part == part)
            .fold(0.0, |sum, s| sum + s.length_us)
    }
}

/// A (scenario, model)'s tail: where its slowest traced requests' time went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TailRow {
    pub scenario: String,
    pub model: String,
    /// Its traced requests.
    pub traced: u64,
    /// Its slowest traced requests, those split here.
    pub tail: u64,
    /// Those of the tail whose time is split (the shares are theirs).
    pub split: u64,
    /// Those of the tail of which no server span arrived.
    pub no_spans: u64,
    /// Those with some server spans, but not all the split needs.
    pub partial: u64,
    /// Each part's share of the split requests' time: the part's sum over their totals' sum
    /// (None: none is split).
    pub shares: Option<Parts<f64>>,
    /// The split requests' mean time from the intended send to the answer (µs).
    pub mean_total_us: Option<f64>,
    /// The slowest [`SLOWEST`] of the tail, slowest first.
    pub slowest: Vec<Waterfall>,
}

/// What the receiver did, since its start (the report prints it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiverCounts {
    /// Export requests received, bad ones too.
    pub bodies: u64,
    pub spans_received: u64,
    pub spans_stored: u64,
    /// Spans not stored: the queue was full, the store failed or did not answer in time, or
    /// the stop's flush ran out of time.
    pub spans_dropped: u64,
    /// Bodies refused: not OTLP, or in an encoding the receiver does not read (not forwarded).
    pub bad_bodies: u64,
    /// Bodies (received, or of client spans) the forward target accepted.
    pub forwarded: u64,
    /// Bodies not forwarded: the queue was full, the send failed or was refused.
    pub forward_dropped: u64,
}

impl ReceiverCounts {
    /// One line for the report: what arrived, and what was lost where.
    pub fn line(&self) -> String {
        let mut line = format!(
            "OTLP receiver: {} server span(s) received, {} stored, {} dropped (queue full or store slow), {} bad bodies",
            self.spans_received, self.spans_stored, self.spans_dropped, self.bad_bodies
        );
        if self.forwarded + self.forward_dropped > 0 {
            line += &format!(
                "; {} body(ies) forwarded, {} not",
                self.forwarded, self.forward_dropped
            );
        }
        line
    }
}

impl stress_common::store::Document for ReceiverCounts {
    const KIND: &'static str = "span_receiver";
}

/// The run's traced tail, joined: report.json's `traced_tail`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceJoin {
    /// The share of each (scenario, model)'s traced requests in its tail.
    pub tail_share: f64,
    pub rows: Vec<TailRow>,
    /// Each server's clock offset, as estimated and applied.
    pub clocks: Vec<ClockOffset>,
    /// Whether any server span of the tail's traces arrived (false: renderers say "server
    /// spans not received").
    pub server_spans_received: bool,
    /// What the run's OTLP receiver did (None: the run had none, e.g. under a launcher that
    /// does not point its servers at it, or a run recorded before it).
    pub receiver: Option<ReceiverCounts>,
}

/// One request of the tail: its client span and its server's times, or why it has none.
struct Request<'a> {
    client: &'a ClientSpan,
    server: Result<(&'a str, ServerTimes), Unjoined>,
}

/// The join of `tail` (read with `tail_share`); None when the run traced nothing.
pub fn join<'t>(tail: &'t TracedTail, tail_share: f64) -> Option<TraceJoin> {
    if tail.traced.is_empty() && tail.client.is_empty() {
        return None;
    }
    let mut by_trace: BTreeMap<String, Vec<&ServerSpan>> = BTreeMap::new();
    for s in &tail.server {
        by_trace
            .entry(s.trace_id.to_ascii_lowercase())
            .or_default()
            .push(s);
    }
    let joined = |client: &'t ClientSpan| {
        let spans = by_trace
            .get(&client.trace_id.to_ascii_lowercase())
            .map_or(&[][..], Vec::as_slice);
        Request {
            client,
            server: server_times(client, spans),
        }
    };
    let requests: Vec<Request> = tail.client.iter().map(joined).collect();
    let fastest: Vec<Request> = tail.fastest.iter().map(joined).collect();
    let clocks = clocks(&fastest, &requests);
    let offsets: BTreeMap<&str, i64> = clocks
        .iter()
        .map(|c| (c.server.as_str(), c.offset_ns))
        .collect();
    let rows = rows(tail, &requests, &offsets);
    Some(TraceJoin {
        tail_share,
        rows,
        clocks,
        server_spans_received: !tail.server.is_empty(),
        receiver: None,
    })
}

/// Every server's clock offset, from the fastest requests it answered; from the tail's only
/// for a server with none of those. Where bounds disagree (Triton's GRPC_SEND_END comes a
/// little after the answer is on the wire), the estimate spans their midpoints, and a tail
/// request's midpoint is off by half its delays.
fn clocks<'c>(fastest: &[Request<'c>], tail: &[Request<'c>]) -> Vec<ClockOffset> {
    let mut bounds = server_bounds(fastest);
    for (server, b) in server_bounds(tail) {
        bounds.entry(server).or_insert(b);
    }
    bounds
        .into_iter()
        .map(|(server, b)| clock_offset(server, &b))
        .collect()
}

/// Each server's requests' bounds on its clock offset.
fn server_bounds<'c>(requests: &[Request<'c>]) -> BTreeMap<&'c str, Vec<(i64, i64)>> {
    let mut bounds: BTreeMap<&str, Vec<(i64, i64)>> = BTreeMap::new();
    for r in requests {
        if let Ok((server, times)) = &r.server {
            bounds
                .entry(*server)
                .or_default()
                .push(offset_bounds(r.client, times));
        }
    }
    bounds
}

/// A row per (scenario, model): those traced, in their order, then any other of the tail.
fn rows(tail: &TracedTail, requests: &[Request], offsets: &BTreeMap<&str, i64>) -> Vec<TailRow> {
    let mut groups: Vec<((&str, &str), u64)> = tail
        .traced
        .iter()
        .map(|c| {
            (
                (c.scenario.as_str(), c.model.as_str()),
                c.traced.max(0) as u64,
            )
        })
        .collect();
    for r in requests {
        let key = (r.client.scenario.as_str(), r.client.model.as_str());
        if !groups.iter().any(|(k, _)| *k == key) {
            groups.push((key, 0));
        }
    }
    groups
        .into_iter()
        .map(|((scenario, model), traced)| {
            let mine: Vec<&Request> = requests
                .iter()
                .filter(|r| r.client.scenario == scenario && r.client.model == model)
                .collect();
            tail_row(scenario, model, traced, &mine, offsets)
        })
        .collect()
}

/// A (scenario, model)'s row from its tail's requests.
fn tail_row(
    scenario: &str,
    model: &str,
    traced: u64,
    requests: &[&Request],
    offsets: &BTreeMap<&str, i64>,
) -> TailRow {
    let mut sums = Parts::<i64>::default();
    let (mut total, mut split, mut no_spans, mut partial) = (0_i64, 0, 0, 0);
    for r in requests {
        match &r.server {
            Ok((server, times)) => {
                let b = boundaries(r.client, times, offsets[server]);
                let p = parts(&b);
                for part in Part::ALL {
                    *sums.field_mut(part) += p.get(part);
                }
                total += b.total();
                split += 1;
            }
            Err(Unjoined::NoSpans) => no_spans += 1,
            Err(Unjoined::Partial(_)) => partial += 1,
        }
    }
    let shares = (split > 0 && total > 0).then(|| {
        let mut shares = Parts::<f64>::default();
        for part in Part::ALL {
            *shares.field_mut(part) = sums.get(part) as f64 / total as f64;
        }
        shares
    });
    let mut slowest: Vec<&&Request> = requests.iter().collect();
    slowest.sort_by_key(|r| std::cmp::Reverse(r.client.answered_ns - r.client.intended_ns));
    TailRow {
        scenario: scenario.to_string(),
        model: model.to_string(),
        traced: traced.max(requests.len() as u64),
        tail: requests.len() as u64,
        split,
        no_spans,
        partial,
        shares,
        mean_total_us: (split > 0).then(|| total as f64 / split as f64 / 1e3),
        slowest: slowest
            .into_iter()
            .take(SLOWEST)
            .map(|r| waterfall(r, offsets))
            .collect(),
    }
}

/// A request's waterfall.
fn waterfall(r: &Request, offsets: &BTreeMap<&str, i64>) -> Waterfall {
    let c = r.client;
    let us = |ns: i64| ns as f64 / 1e3;
    let total_us = us((c.answered_ns - c.intended_ns).max(0));
    match &r.server {
        Ok((server, times)) => {
            let b = boundaries(c, times, offsets[server]);
            let segments = b
                .stretches()
                .filter(|(_, start, end)| end > start)
                .map(|(part, start, end)| Segment {
                    part,
                    start_us: us(start - b.start),
                    length_us: us(end - start),
                })
                .collect();
            Waterfall {
                trace_id: c.trace_id.clone(),
                server: server.to_string(),
                ok: c.ok,
                total_us,
                segments,
                unsplit: None,
            }
        }
        Err(why) => Waterfall {
            trace_id: c.trace_id.clone(),
            server: c.server.clone(),
            ok: c.ok,
            total_us,
            segments: Vec::new(),
            unsplit: Some(why.describe()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stress_common::store::TracedCount;
    use stress_common::trace::SpanEvent;

    const MS: i64 = 1_000_000;
    const US: i64 = 1_000;
    /// A Unix time in ns, in late 2026.
    const T0: i64 = 1_796_445_262_000_000_000;

    /// What really happened to a request, in the client's clock (ns after its intended send):
    /// each part's length, in time order.
    #[derive(Clone, Copy)]
    struct Truth {
        client: i64,
        transport_in: i64,
        handling_in: i64,
        queue: i64,
        input: i64,
        infer: i64,
        output: i64,
        handling_out: i64,
        transport_out: i64,
        /// How long the answer waited on the client's host to be read: `None` when the
        /// client has no kernel receive time (its span then ends at the answer).
        read: Option<i64>,
    }

    impl Truth {
        fn parts(&self) -> Parts<i64> {
            Parts {
                client: self.client + self.read.unwrap_or(0),
                transport_in: self.transport_in,
                transport_out: self.transport_out,
                handling: self.handling_in + self.handling_out,
                queue: self.queue,
                compute_input: self.input,
                compute_infer: self.infer,
                compute_output: self.output,
            }
        }

        fn total(&self) -> i64 {
            let p = self.parts();
            Part::ALL.iter().map(|&x| p.get(x)).sum()
        }
    }

    /// A python model sleeping 20 ms, one request in flight: compute infer is its time.
    fn sleeping_20ms() -> Truth {
        Truth {
            client: 15 * US,
            transport_in: 120 * US,
            handling_in: 60 * US,
            queue: 40 * US,
            input: 45 * US,
            infer: 20 * MS,
            output: 95 * US,
            handling_out: 80 * US,
            transport_out: 150 * US,
            read: None,
        }
    }

    /// The spans of `truth` for request `i` (sent over `protocol`, "http" or "grpc"), intended
    /// at `at`, exported by `server` whose clock is `skew` ahead of the client's.
    fn request(
        i: u64,
        at: i64,
        truth: Truth,
        server: &str,
        skew: i64,
        protocol: &str,
    ) -> (ClientSpan, Vec<ServerSpan>) {
        let t = &truth;
        let sent = at + t.client;
        let server_in = sent + t.transport_in;
        let queue_start = server_in + t.handling_in;
        let compute_start = queue_start + t.queue;
        let input_end = compute_start + t.input;
        let output_start = input_end + t.infer;
        let compute_end = output_start + t.output;
        let server_out = compute_end + t.handling_out;
        let received = server_out + t.transport_out;
        let answered = received + t.read.unwrap_or(0);
        let client = ClientSpan {
            trace_id: format!("{:032x}", 0xabc0_0000 + i),
            span_id: format!("{:016x}", 0x100 + i),
            scenario: "Infer".into(),
            model: "slow".into(),
            server: "127.0.0.1:8001".into(),
            intended_ns: at,
            sent_ns: sent,
            answered_ns: answered,
            received_ns: t.read.map(|_| received),
            ok: true,
        };
        let s = |t: i64| t + skew;
        let frontend = if protocol == "http" {
            vec![
                ("HTTP_RECV_START", s(server_in)),
                ("HTTP_RECV_END", s(server_in + 5 * US)),
                ("INFER_RESPONSE_COMPLETE", s(compute_end - 10 * US)),
                ("HTTP_SEND_START", s(server_out - 6 * US)),
                ("HTTP_SEND_END", s(server_out)),
            ]
        } else {
            vec![
                // Posted long before the request was sent: never the request's arrival.
                ("GRPC_WAITREAD_START", s(at - 5_000 * MS)),
                ("GRPC_WAITREAD_END", s(server_in)),
                ("INFER_RESPONSE_COMPLETE", s(compute_end - 10 * US)),
                ("GRPC_SEND_START", s(server_out - 6 * US)),
                ("GRPC_SEND_END", s(server_out)),
            ]
        };
        let span = |id: u64, parent: &str, name: &str, events: Vec<(&str, i64)>| ServerSpan {
            server: server.into(),
            trace_id: client.trace_id.clone(),
            span_id: format!("{id:016x}"),
            parent_span_id: parent.into(),
            name: name.into(),
            start_ns: events.first().map_or(0, |e| e.1),
            end_ns: events.last().map_or(0, |e| e.1),
            events: events
                .into_iter()
                .map(|(name, at_ns)| SpanEvent {
                    name: name.into(),
                    at_ns,
                })
                .collect(),
        };
        let (infer_id, model_id) = (0x1000 + i, 0x2000 + i);
        let spans = vec![
            span(
                0x3000 + i,
                &format!("{model_id:016x}"),
                "compute",
                vec![
                    ("COMPUTE_START", s(compute_start)),
                    ("COMPUTE_INPUT_END", s(input_end)),
                    ("COMPUTE_OUTPUT_START", s(output_start)),
                    ("COMPUTE_END", s(compute_end)),
                ],
            ),
            span(
                model_id,
                &format!("{infer_id:016x}"),
                "slow",
                vec![
                    ("REQUEST_START", s(server_in + 20 * US)),
                    ("QUEUE_START", s(queue_start)),
                    ("REQUEST_END", s(compute_end + 5 * US)),
                ],
            ),
            span(infer_id, &client.span_id, "InferRequest", frontend),
        ];
        (client, spans)
    }

    /// `n` requests of `truth`, one every 50 ms.
    fn run(n: u64, truth: impl Fn(u64) -> Truth, skew: i64, protocol: &str) -> TracedTail {
        let mut tail = TracedTail {
            traced: vec![TracedCount {
                scenario: "Infer".into(),
                model: "slow".into(),
                traced: 100 * n as i64,
            }],
            ..TracedTail::default()
        };
        for i in 0..n {
            let at = T0 + i as i64 * 50 * MS;
            let (client, spans) = request(i, at, truth(i), "triton-0", skew, protocol);
            tail.client.push(client);
            tail.server.extend(spans);
        }
        tail
    }

    /// A client too busy to read its answers at once (answered 200 ms late) widens its tail
    /// requests' bounds on the clock by as much; the fastest requests, read with the tail, keep
    /// the offset where it is (here 0: one clock).
    #[test]
    fn the_fastest_requests_hold_the_clock_when_the_tail_reads_late() {
        let truth = |_| sleeping_20ms();
        let mut tail = run(20, truth, 0, "http");
        let late = 200 * MS;
        for c in &mut tail.client {
            c.answered_ns += late;
        }
        let alone = join(&tail, TAIL_SHARE).unwrap().clocks[0].clone();
        assert!(alone.offset_ns.abs() > 10 * MS, "{alone:?}");
        let fast = run(20, truth, 0, "http");
        tail.fastest = fast.client;
        tail.server.extend(fast.server);
        let held = join(&tail, TAIL_SHARE).unwrap().clocks[0].clone();
        assert!(held.offset_ns.abs() <= MS, "{held:?}");
    }

    fn split_of(tail: &TracedTail) -> (Vec<Parts<i64>>, ClockOffset) {
        let requests: Vec<Request> = tail
            .client
            .iter()
            .map(|client| {
                let spans: Vec<&ServerSpan> = tail
                    .server
                    .iter()
                    .filter(|s| s.trace_id == client.trace_id)
                    .collect();
                Request {
                    client,
                    server: server_times(client, &spans),
                }
            })
            .collect();
        let clock = clocks(&requests, &[]).remove(0);
        let parts = requests
            .iter()
            .map(|r| {
                let (_, times) = r.server.as_ref().unwrap();
                parts(&boundaries(r.client, times, clock.offset_ns))
            })
            .collect();
        (parts, clock)
    }

    /// Whether `a` and `b` differ by at most `by` in every part.
    fn within(a: &Parts<i64>, b: &Parts<i64>, by: i64) -> bool {
        Part::ALL.iter().all(|&p| (a.get(p) - b.get(p)).abs() <= by)
    }

    fn sum(p: &Parts<i64>) -> i64 {
        Part::ALL.iter().map(|&x| p.get(x)).sum()
    }

    /// Finding a request's server spans from its client span.
    mod the_join {
        use super::*;

        #[test]
        fn finds_infer_request_under_the_client_span_then_the_model_then_compute() {
            let (client, spans) = request(1, T0, sleeping_20ms(), "triton-0", 0, "http");
            let refs: Vec<&ServerSpan> = spans.iter().collect();
            let (server, times) = server_times(&client, &refs).unwrap();
            assert_eq!(server, "triton-0");
            assert_eq!(times.server_in, client.sent_ns + 120 * US);
            assert_eq!(times.queue_start - times.server_in, 60 * US);
            assert_eq!(
                times.computes[0].output_start - times.computes[0].input_end,
                20 * MS
            );
            assert_eq!(client.answered_ns - times.server_out, 150 * US);
        }

        #[test]
        fn a_grpc_request_is_in_at_waitread_end_never_at_waitread_start() {
            let (client, spans) = request(1, T0, sleeping_20ms(), "triton-0", 0, "grpc");
            let refs: Vec<&ServerSpan> = spans.iter().collect();
            let (_, times) = server_times(&client, &refs).unwrap();
            assert_eq!(times.server_in, client.sent_ns + 120 * US);
            let tail = run(4, |_| sleeping_20ms(), 0, "grpc");
            let (parts, _) = split_of(&tail);
            for p in parts {
                // Read from WAITREAD_START, handling would be 5 s.
                assert!(
                    p.handling < MS && p.transport_in + p.transport_out < MS,
                    "{p:?}"
                );
            }
        }

        #[test]
        fn spans_of_another_request_of_the_same_trace_are_not_taken() {
            let (client, mut spans) = request(1, T0, sleeping_20ms(), "triton-0", 0, "http");
            for s in &mut spans {
                if s.name == "InferRequest" {
                    s.parent_span_id = "00000000000000ff".into();
                }
            }
            let refs: Vec<&ServerSpan> = spans.iter().collect();
            assert_eq!(
                server_times(&client, &refs),
                Err(Unjoined::Partial("no InferRequest span under the client's"))
            );
        }

        #[test]
        fn spans_that_never_arrived_are_counted_not_guessed() {
            let (client, spans) = request(1, T0, sleeping_20ms(), "triton-0", 0, "http");
            assert_eq!(server_times(&client, &[]), Err(Unjoined::NoSpans));
            // The frontend's span alone (the model's and compute's lost): partial.
            let infer: Vec<&ServerSpan> =
                spans.iter().filter(|s| s.name == "InferRequest").collect();
            assert_eq!(
                server_times(&client, &infer),
                Err(Unjoined::Partial("no model span with QUEUE_START"))
            );
            let no_compute: Vec<&ServerSpan> =
                spans.iter().filter(|s| s.name != "compute").collect();
            assert_eq!(
                server_times(&client, &no_compute),
                Err(Unjoined::Partial("no compute span"))
            );
        }

        /// Triton 2.51's own exports (common/src/testdata), the client's span made up around
        /// them: its request 300 µs before the receipt, its answer 400 µs after the send.
        #[test]
        fn tritons_real_exports_join_over_http_and_grpc() {
            // (body, the client's span id, then from its events: handling, queue, infer (ns)).
            for (body, parent, handling, queue, compute_infer) in [
                (
                    include_str!("../../../common/src/testdata/tritonserver-2.51-otlp-http.json"),
                    "b7ad6b7169203331",
                    308_541 + 88_903,
                    60_035,
                    18_048_256,
                ),
                (
                    include_str!("../../../common/src/testdata/tritonserver-2.51-otlp-grpc.json"),
                    "c7ad6b7169203331",
                    199_367 + 29_023,
                    27_582,
                    320_178,
                ),
            ] {
                let spans = otlp_spans(body);
                let infer = spans.iter().find(|s| s.name == "InferRequest").unwrap();
                let server_in = infer
                    .event("HTTP_RECV_START")
                    .or(infer.event("GRPC_WAITREAD_END"))
                    .unwrap();
                let server_out = infer
                    .event("HTTP_SEND_END")
                    .or(infer.event("GRPC_SEND_END"))
                    .unwrap();
                let client = ClientSpan {
                    trace_id: infer.trace_id.clone(),
                    span_id: parent.into(),
                    scenario: "Infer".into(),
                    model: "add_sub".into(),
                    server: "127.0.0.1:8001".into(),
                    intended_ns: server_in - 300 * US,
                    sent_ns: server_in - 300 * US,
                    answered_ns: server_out + 400 * US,
                    received_ns: None,
                    ok: true,
                };
                let tail = TracedTail {
                    traced: Vec::new(),
                    client: vec![client.clone()],
                    fastest: Vec::new(),
                    server: spans.clone(),
                };
                let joined = join(&tail, TAIL_SHARE).unwrap();
                let row = &joined.rows[0];
                assert_eq!((row.split, row.no_spans, row.partial), (1, 0, 0), "{row:?}");
                let w = &row.slowest[0];
                let total = (client.answered_ns - client.intended_ns) as f64 / 1e3;
                assert!((w.total_us - total).abs() < 1e-6);
                // One request: the offset is the middle of what it allows, its transport
                // split evenly (350 µs each way) whatever the clocks.
                let us = |ns: i64| ns as f64 / 1e3;
                assert!(
                    (w.part_us(Part::TransportIn) + w.part_us(Part::TransportOut) - 700.0).abs()
                        < 1e-6,
                    "{w:?}"
                );
                assert!(
                    (w.part_us(Part::Handling) - us(handling)).abs() < 1e-6,
                    "{w:?}"
                );
                assert!((w.part_us(Part::Queue) - us(queue)).abs() < 1e-6, "{w:?}");
                assert!(
                    (w.part_us(Part::ComputeInfer) - us(compute_infer)).abs() < 1e-6,
                    "{w:?}"
                );
            }
        }

        /// The OTLP/JSON spans of an export body (what the receiver stores), named by server
        /// `triton-0`.
        fn otlp_spans(body: &str) -> Vec<ServerSpan> {
            let v: serde_json::Value = serde_json::from_str(body).unwrap();
            let ns = |v: &serde_json::Value| v.as_str().unwrap().parse::<i64>().unwrap();
            let mut out = Vec::new();
            for rs in v["resourceSpans"].as_array().unwrap() {
                for ss in rs["scopeSpans"].as_array().unwrap() {
                    for s in ss["spans"].as_array().unwrap() {
                        out.push(ServerSpan {
                            server: "triton-0".into(),
                            trace_id: s["traceId"].as_str().unwrap().into(),
                            span_id: s["spanId"].as_str().unwrap().into(),
                            parent_span_id: s["parentSpanId"].as_str().unwrap_or("").into(),
                            name: s["name"].as_str().unwrap().into(),
                            start_ns: ns(&s["startTimeUnixNano"]),
                            end_ns: ns(&s["endTimeUnixNano"]),
                            events: s["events"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .map(|e| SpanEvent {
                                    name: e["name"].as_str().unwrap().into(),
                                    at_ns: ns(&e["timeUnixNano"]),
                                })
                                .collect(),
                        });
                    }
                }
            }
            out
        }
    }

    /// A request's time split into parts that add up exactly, none negative.
    mod the_split {
        use super::*;

        /// An ensemble of two steps (Triton 2.51's shape: the ensemble's span, each step's
        /// model span under it, each step's `compute` under that), the second a model that
        /// calls another from its compute (as a python BLS model does: that call's spans are
        /// inside its compute, not a step of the ensemble).
        #[test]
        fn an_ensembles_steps_are_each_split_and_the_time_between_them_is_queue() {
            let truth = sleeping_20ms();
            let (client, mut spans) = request(1, T0, truth, "triton-0", 0, "http");
            let model = spans.iter().find(|s| s.name == "slow").unwrap().clone();
            let compute = spans.iter().position(|s| s.name == "compute").unwrap();
            let (start, end) = (spans[compute].start_ns, spans[compute].end_ns);
            let span = |id: &str, parent: &str, name: &str, events: &[(&str, i64)]| ServerSpan {
                span_id: id.into(),
                parent_span_id: parent.into(),
                name: name.into(),
                events: events
                    .iter()
                    .map(|&(name, at_ns)| SpanEvent {
                        name: name.into(),
                        at_ns,
                    })
                    .collect(),
                ..model.clone()
            };
            let compute_events = |at: [i64; 4]| {
                [
                    ("COMPUTE_START", at[0]),
                    ("COMPUTE_INPUT_END", at[1]),
                    ("COMPUTE_OUTPUT_START", at[2]),
                    ("COMPUTE_END", at[3]),
                ]
            };
            let step_events = |at: i64| {
                [
                    ("REQUEST_START", at - 9 * US),
                    ("QUEUE_START", at - 8 * US),
                    ("REQUEST_END", at + 3 * MS),
                ]
            };
            let first = [start, start + 10 * US, start + MS, start + MS + 5 * US];
            let second = [start + 2 * MS, start + 2 * MS + 35 * US, end - 90 * US, end];
            spans.remove(compute);
            spans.extend([
                span(
                    "00000000000000a1",
                    &model.span_id,
                    "pre",
                    &step_events(first[0]),
                ),
                span(
                    "00000000000000c1",
                    "00000000000000a1",
                    "compute",
                    &compute_events(first),
                ),
                span(
                    "00000000000000a2",
                    &model.span_id,
                    "main",
                    &step_events(second[0]),
                ),
                span(
                    "00000000000000c2",
                    "00000000000000a2",
                    "compute",
                    &compute_events(second),
                ),
                span(
                    "00000000000000b1",
                    "00000000000000c2",
                    "inner",
                    &step_events(second[1]),
                ),
                span(
                    "00000000000000b2",
                    "00000000000000b1",
                    "compute",
                    &compute_events(second),
                ),
            ]);
            let refs: Vec<&ServerSpan> = spans.iter().collect();
            let (_, times) = server_times(&client, &refs).unwrap();
            assert_eq!(
                times.computes.len(),
                2,
                "the BLS call inside a compute is not a step"
            );
            let p = parts(&boundaries(&client, &times, 0));
            let expected = Parts {
                queue: truth.queue + (second[0] - first[3]),
                compute_input: (first[1] - first[0]) + (second[1] - second[0]),
                compute_infer: (first[2] - first[1]) + (second[2] - second[1]),
                compute_output: (first[3] - first[2]) + (second[3] - second[2]),
                ..truth.parts()
            };
            assert_eq!(p, expected);
            assert_eq!(sum(&p), client.answered_ns - client.intended_ns);
            // Its waterfall has both steps' stretches, in time order.
            let queues = boundaries(&client, &times, 0)
                .stretches()
                .filter(|(part, start, end)| *part == Part::Queue && end > start)
                .count();
            assert_eq!(queues, 2);
        }

        #[test]
        fn parts_add_up_to_the_time_from_the_intended_send_to_the_answer() {
            let truth = sleeping_20ms();
            let (client, spans) = request(1, T0, truth, "triton-0", 0, "http");
            let refs: Vec<&ServerSpan> = spans.iter().collect();
            let (_, times) = server_times(&client, &refs).unwrap();
            // With the true offset (0), every part is the truth.
            let p = parts(&boundaries(&client, &times, 0));
            assert_eq!(p, truth.parts());
            assert_eq!(sum(&p), client.answered_ns - client.intended_ns);
        }

        #[test]
        fn a_part_of_no_length_is_zero_not_minus_zero() {
            let w = Waterfall {
                trace_id: "t".into(),
                server: "triton-0".into(),
                ok: true,
                total_us: 5.0,
                segments: vec![Segment {
                    part: Part::Queue,
                    start_us: 0.0,
                    length_us: 5.0,
                }],
                unsplit: None,
            };
            assert_eq!(format!("{:.2}", w.part_us(Part::TransportOut)), "0.00");
            assert_eq!(w.part_us(Part::Queue), 5.0);
        }

        #[test]
        fn compute_that_outlasts_the_response_is_clamped_not_negative() {
            // INFER_RESPONSE_COMPLETE can come before COMPUTE_END; a COMPUTE_END even after
            // the send's end (or a wrong offset) must not make any part negative.
            let (client, spans) = request(1, T0, sleeping_20ms(), "triton-0", 0, "http");
            let refs: Vec<&ServerSpan> = spans.iter().collect();
            let (_, mut times) = server_times(&client, &refs).unwrap();
            times.computes[0].end = times.server_out + 50 * US;
            for offset in [-10 * MS, -200 * US, 0, 200 * US, 10 * MS] {
                let b = boundaries(&client, &times, offset);
                assert!(
                    b.stretches().all(|(_, start, end)| start <= end),
                    "{offset}: {b:?}"
                );
                let p = parts(&b);
                assert!(Part::ALL.iter().all(|&x| p.get(x) >= 0), "{p:?}");
                assert_eq!(sum(&p), client.answered_ns - client.intended_ns);
            }
        }

        #[test]
        fn an_open_loop_request_sent_late_counts_the_delay_as_the_clients() {
            let truth = Truth {
                client: 3 * MS,
                ..sleeping_20ms()
            };
            let tail = run(3, |_| truth, 0, "http");
            let (parts, clock) = split_of(&tail);
            for p in parts {
                assert_eq!(p.client, 3 * MS);
                assert!(within(&p, &truth.parts(), clock.bound_ns), "{p:?}");
            }
        }
    }

    /// A client short of CPU reads its answers late: with the kernel's receive time that wait
    /// is the client's; without it, it cannot be told from the wire's.
    mod a_late_read {
        use super::*;

        fn starved(read: Option<i64>) -> Truth {
            Truth {
                read,
                ..sleeping_20ms()
            }
        }

        #[test]
        fn is_the_client_s_when_the_kernel_s_receive_time_is_known() {
            let truth = starved(Some(30 * MS));
            let tail = run(5, |_| truth, 3_000 * MS, "grpc");
            let (parts, clock) = split_of(&tail);
            for p in parts {
                assert!(p.client >= 30 * MS, "{p:?}");
                assert!(p.transport_out < MS, "{p:?}");
                assert!(within(&p, &truth.parts(), clock.bound_ns), "{p:?}");
            }
            // The tail's shares: the client's half of it (30 of ~50.6 ms), all adding up.
            let shares = join(&tail, 1.0).unwrap().rows[0].shares.unwrap();
            assert!((shares.client - 30.0 / 50.65).abs() < 0.01, "{shares:?}");
            let sum: f64 = Part::ALL.iter().map(|&x| shares.get(x)).sum();
            assert!((sum - 1.0).abs() < 1e-9, "{shares:?}");
        }

        #[test]
        fn is_transport_out_when_it_is_not() {
            let mut tail = run(5, |_| starved(Some(30 * MS)), 0, "grpc");
            for c in &mut tail.client {
                c.received_ns = None;
            }
            // Nor is the offset then bounded by the arrival: the wait is split between the
            // ways in and out.
            let (parts, _) = split_of(&tail);
            for p in parts {
                assert!(p.client < MS, "{p:?}");
                assert!(p.transport_in + p.transport_out >= 30 * MS, "{p:?}");
            }
        }
    }

    /// The server's clock offset, estimated and applied.
    mod clocks {
        use super::*;

        /// Transport that varies from request to request, as it does.
        fn varied(i: u64) -> Truth {
            Truth {
                transport_in: (100 + 37 * (i as i64 % 5)) * US,
                transport_out: (140 + 23 * (i as i64 % 7)) * US,
                ..sleeping_20ms()
            }
        }

        #[test]
        fn a_skewed_server_clock_gives_the_same_parts_within_the_bound() {
            let (unskewed, clock) = split_of(&run(20, varied, 0, "http"));
            assert!(clock.consistent);
            for skew in [3_000 * MS, -250 * MS, 1] {
                let (skewed, skewed_clock) = split_of(&run(20, varied, skew, "http"));
                assert_eq!(skewed_clock.offset_ns - clock.offset_ns, skew);
                assert_eq!(skewed_clock.bound_ns, clock.bound_ns);
                for (i, (a, b)) in skewed.iter().zip(&unskewed).enumerate() {
                    assert!(within(a, b, skewed_clock.bound_ns), "{skew}: {a:?} {b:?}");
                    // And the truth, within the bound.
                    assert!(
                        within(a, &varied(i as u64).parts(), skewed_clock.bound_ns),
                        "{skew}: {a:?}"
                    );
                    assert!(a.transport_in + a.transport_out > 0);
                }
            }
        }

        #[test]
        fn the_offset_is_the_middle_of_what_every_request_allows() {
            // server in − sent ∈ skew + [100, 248] µs, server out − answered ∈ skew − [140,
            // 278] µs: the intersection is skew + [−140, 100] µs.
            let skew = 3_000 * MS;
            let (_, clock) = split_of(&run(35, varied, skew, "http"));
            assert_eq!(clock.offset_ns, skew - 20 * US);
            assert_eq!(clock.bound_ns, 120 * US);
            assert!(skew >= clock.offset_ns - clock.bound_ns);
            assert!(skew <= clock.offset_ns + clock.bound_ns);
            assert_eq!(clock.requests, 35);
        }

        #[test]
        fn requests_that_disagree_give_the_median_and_never_a_negative_transport() {
            // A client clock 100 ms ahead for one request (longer than the request takes):
            // its bounds exclude the others'.
            let skew = -250 * MS;
            let mut tail = run(5, varied, skew, "http");
            let c = &mut tail.client[2];
            c.intended_ns += 100 * MS;
            c.sent_ns += 100 * MS;
            c.answered_ns += 100 * MS;
            let (parts, clock) = split_of(&tail);
            assert!(!clock.consistent);
            // The median is one of the agreeing requests'.
            assert!((clock.offset_ns - skew).abs() < 300 * US, "{clock:?}");
            for p in &parts {
                assert!(Part::ALL.iter().all(|&x| p.get(x) >= 0), "{p:?}");
            }
            // Its server times fall before its send: each is clamped there, and its time
            // after the send is all transport, not a negative part.
            let c = &tail.client[2];
            assert_eq!(sum(&parts[2]), c.answered_ns - c.intended_ns);
            assert_eq!(
                parts[2].transport_in + parts[2].transport_out,
                c.answered_ns - c.sent_ns,
                "{:?}",
                parts[2]
            );
        }

        #[test]
        fn each_server_has_its_own_offset() {
            let mut tail = run(4, varied, 3_000 * MS, "http");
            let other = run(4, varied, -250 * MS, "grpc");
            for (mut c, s) in other.client.into_iter().zip(other.server.chunks(3)) {
                c.trace_id = c.trace_id.replace("abc", "def");
                tail.client.push(c.clone());
                for mut s in s.iter().cloned() {
                    s.server = "triton-1".into();
                    s.trace_id = c.trace_id.clone();
                    tail.server.push(s);
                }
            }
            let joined = join(&tail, TAIL_SHARE).unwrap();
            let offsets: Vec<(&str, i64)> = joined
                .clocks
                .iter()
                .map(|c| (c.server.as_str(), c.offset_ns))
                .collect();
            assert_eq!(offsets.len(), 2);
            assert!((offsets[0].1 - 3_000 * MS).abs() < MS, "{offsets:?}");
            assert_eq!(offsets[1].0, "triton-1");
            assert!((offsets[1].1 + 250 * MS).abs() < MS, "{offsets:?}");
            let row = &joined.rows[0];
            assert_eq!(row.split, 8);
            let shares = row.shares.unwrap();
            assert!(
                shares.transport_in + shares.transport_out < 0.05,
                "{shares:?}"
            );
        }

        #[test]
        fn the_fastest_requests_bound_the_clock_not_the_tail_s_wide_ones() {
            let skew = 3_000 * MS;
            // The tail: answers read 30 ms late, with no receive time: bounds 30 ms wide.
            let late = |_| Truth {
                read: Some(30 * MS),
                ..sleeping_20ms()
            };
            let mut tail = run(5, late, skew, "grpc");
            for c in &mut tail.client {
                c.received_ns = None;
            }
            // The fastest, one of whose GRPC_SEND_END comes 1 ms after its answer arrived:
            // their bounds disagree, and the offset is their midpoints' median.
            let quick = run(5, |_| sleeping_20ms(), skew, "grpc");
            for (i, (mut c, spans)) in quick
                .client
                .into_iter()
                .zip(quick.server.chunks(3))
                .enumerate()
            {
                c.trace_id = c.trace_id.replace("abc", "def");
                tail.fastest.push(c.clone());
                for mut s in spans.iter().cloned() {
                    s.trace_id = c.trace_id.clone();
                    for e in s
                        .events
                        .iter_mut()
                        .filter(|e| i == 0 && e.name == "GRPC_SEND_END")
                    {
                        e.at_ns += MS;
                    }
                    tail.server.push(s);
                }
            }
            let clock = join(&tail, 1.0).unwrap().clocks.remove(0);
            assert!(!clock.consistent, "{clock:?}");
            assert!(clock.bound_ns < MS, "{clock:?}");
            assert!(
                (clock.offset_ns - skew).abs() <= clock.bound_ns,
                "{clock:?}"
            );
        }
    }

    /// The tail per (scenario, model): shares, counts and waterfalls.
    mod the_tail {
        use super::*;

        fn share_sum(s: &Parts<f64>) -> f64 {
            Part::ALL.iter().map(|&p| s.get(p)).sum()
        }

        #[test]
        fn a_model_sleeping_20ms_spends_the_tail_in_compute_infer() {
            let joined = join(&run(10, |_| sleeping_20ms(), 3_000 * MS, "grpc"), 0.01).unwrap();
            let row = &joined.rows[0];
            assert_eq!((row.traced, row.tail, row.split), (1000, 10, 10));
            let s = row.shares.unwrap();
            assert!((share_sum(&s) - 1.0).abs() < 1e-9, "{s:?}");
            assert!(s.compute_infer > 0.95, "{s:?}");
            let top = Part::ALL
                .into_iter()
                .max_by(|a, b| s.get(*a).total_cmp(&s.get(*b)));
            assert_eq!(top, Some(Part::ComputeInfer));
            let total = sleeping_20ms().total() as f64 / 1e3;
            assert!((row.mean_total_us.unwrap() - total).abs() < 1e-6);
        }

        #[test]
        fn one_instance_with_8_in_flight_spends_the_tail_in_the_queue() {
            // Each waits for up to 7 others' 20 ms ahead of it.
            let queued = |i: u64| Truth {
                queue: 20 * MS * (i % 8) as i64,
                ..sleeping_20ms()
            };
            let joined = join(&run(16, queued, -250 * MS, "http"), 0.01).unwrap();
            let s = joined.rows[0].shares.unwrap();
            assert!((share_sum(&s) - 1.0).abs() < 1e-9, "{s:?}");
            // 7 × 8 / 2 = 28 of every 36 compute times queue.
            assert!(s.queue > 0.7 && s.queue > s.compute_infer, "{s:?}");
            assert!(
                s.transport_in + s.transport_out < 0.01 && s.client < 0.01,
                "{s:?}"
            );
        }

        #[test]
        fn shares_are_summed_parts_over_summed_totals() {
            // One request of 20 ms in compute, one of 100 ms in the queue: by sums, the queue
            // has 100/120 of the time (a mean of per-request shares would say about half).
            let a = Truth {
                infer: 20 * MS,
                queue: 0,
                ..sleeping_20ms()
            };
            let b = Truth {
                infer: 0,
                queue: 100 * MS,
                ..sleeping_20ms()
            };
            let truths = [a, b];
            let joined = join(&run(2, |i| truths[i as usize], 0, "http"), 0.01).unwrap();
            let s = joined.rows[0].shares.unwrap();
            let totals = (a.total() + b.total()) as f64;
            let bound = joined.clocks[0].bound_ns as f64 * 2.0 / totals;
            assert!((s.queue - 100e6 / totals).abs() <= bound, "{s:?}");
            assert!((s.compute_infer - 20e6 / totals).abs() <= bound, "{s:?}");
        }

        #[test]
        fn requests_without_spans_are_counted_and_left_out_of_the_shares() {
            let mut tail = run(6, |_| sleeping_20ms(), 0, "http");
            let lost = tail.client[1].trace_id.clone();
            tail.server.retain(|s| s.trace_id != lost);
            let cut = tail.client[3].trace_id.clone();
            tail.server
                .retain(|s| !(s.trace_id == cut && s.name == "compute"));
            // The slowest of all (10 s in the client) is one whose spans never came.
            tail.client[1].intended_ns -= 10_000 * MS;
            let joined = join(&tail, 0.01).unwrap();
            let row = &joined.rows[0];
            assert_eq!(
                (row.tail, row.split, row.no_spans, row.partial),
                (6, 4, 1, 1)
            );
            // Only the split ones count: still all compute.
            assert!(row.shares.unwrap().compute_infer > 0.95);
            assert_eq!(row.slowest.len(), SLOWEST);
            let first = &row.slowest[0];
            assert_eq!(first.trace_id, lost);
            assert!(first.segments.is_empty());
            assert_eq!(first.unsplit.as_deref(), Some("server spans not received"));
            assert_eq!(first.server, "127.0.0.1:8001");
            assert!(first.total_us > 10_000_000.0);
            assert!(joined.server_spans_received);
        }

        #[test]
        fn when_no_server_span_arrived_the_join_says_so() {
            let mut tail = run(3, |_| sleeping_20ms(), 0, "http");
            tail.server.clear();
            let joined = join(&tail, 0.01).unwrap();
            assert!(!joined.server_spans_received);
            assert!(joined.clocks.is_empty());
            let row = &joined.rows[0];
            assert_eq!((row.split, row.no_spans, row.shares), (0, 3, None));
        }

        #[test]
        fn nothing_traced_is_no_join() {
            assert_eq!(join(&TracedTail::default(), 0.01), None);
        }

        #[test]
        fn the_slowest_are_waterfalls_in_time_order_slowest_first() {
            let slower = |i: u64| Truth {
                infer: (20 + i as i64) * MS,
                read: Some(30 * US),
                ..sleeping_20ms()
            };
            let joined = join(&run(8, slower, 0, "http"), 0.01).unwrap();
            let row = &joined.rows[0];
            let totals: Vec<f64> = row.slowest.iter().map(|w| w.total_us).collect();
            assert_eq!(totals.len(), SLOWEST);
            assert!(totals.windows(2).all(|t| t[0] > t[1]), "{totals:?}");
            let w = &row.slowest[0];
            assert_eq!(w.trace_id, format!("{:032x}", 0xabc0_0000_u64 + 7));
            assert_eq!((w.server.as_str(), w.ok), ("triton-0", true));
            let order: Vec<Part> = w.segments.iter().map(|s| s.part).collect();
            // A model's request: one compute, Triton's handling on both sides of it.
            let mut expected = Part::ALL[..7].to_vec();
            expected.extend([Part::Handling, Part::TransportOut, Part::Client]);
            assert_eq!(order, expected);
            // Each starts where the one before ends, the last ends at the answer.
            assert_eq!(w.segments[0].start_us, 0.0);
            for pair in w.segments.windows(2) {
                assert!((pair[0].start_us + pair[0].length_us - pair[1].start_us).abs() < 1e-6);
            }
            let last = w.segments.last().unwrap();
            assert!((last.start_us + last.length_us - w.total_us).abs() < 1e-6);
            assert!((w.part_us(Part::ComputeInfer) - 27_000.0).abs() < 1e-6);
        }

        #[test]
        fn each_scenario_and_model_has_its_row() {
            let mut tail = run(3, |_| sleeping_20ms(), 0, "http");
            let other = run(2, |_| sleeping_20ms(), 0, "http");
            for (mut c, spans) in other.client.into_iter().zip(other.server.chunks(3)) {
                c.model = "fast".into();
                c.trace_id = c.trace_id.replace("abc", "def");
                tail.client.push(c.clone());
                tail.server.extend(spans.iter().cloned().map(|mut s| {
                    s.trace_id = c.trace_id.clone();
                    s
                }));
            }
            let joined = join(&tail, 0.01).unwrap();
            let rows: Vec<(&str, u64, u64)> = joined
                .rows
                .iter()
                .map(|r| (r.model.as_str(), r.traced, r.tail))
                .collect();
            // "fast" is not among the traced counts: its tail is all that is known of it.
            assert_eq!(rows, [("slow", 300, 3), ("fast", 2, 2)]);
        }

        #[test]
        fn report_json_carries_parts_by_name() {
            let joined = join(&run(2, |_| sleeping_20ms(), 0, "http"), 0.01).unwrap();
            let json = serde_json::to_value(&joined).unwrap();
            let row = &json["rows"][0];
            assert!(
                row["shares"]["compute_infer"].as_f64().unwrap() > 0.9,
                "{json:#}"
            );
            assert_eq!(row["slowest"][0]["segments"][0]["part"], "client");
            assert_eq!(json["server_spans_received"], true);
            let back: TraceJoin = serde_json::from_value(json).unwrap();
            assert_eq!(back, joined);
        }
    }
}
