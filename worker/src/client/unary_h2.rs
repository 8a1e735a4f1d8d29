//! Unary gRPC calls on a lean HTTP/2 client connection of our own.
//!
//! Why not the h2 crate for these: at concurrency 1 a client's CPU per request is the fixed cost
//! of one call, and h2's general machinery (its stream store, prioritisation, an HPACK encoder,
//! a task hop to a connection task for every write) was about half of the worker's. A unary call
//! needs little of it: its request headers are a constant block (no HPACK encoder state: every
//! field is a literal "without indexing"), its body leaves with them, and the calling task writes
//! them itself. The connection task only reads: it parses frames, decodes response headers
//! (HPACK with its dynamic table, `loona-hpack`), and hands each stream its message.
//!
//! What HTTP/2 asks of a client is all here: the peer's SETTINGS (concurrent streams, initial
//! window, frame size) are honoured and acknowledged, PINGs answered, request bodies wait for
//! flow-control credit, GOAWAY and RST_STREAM end the calls they name. Our receive windows are the
//! largest allowed and topped up as data is read, so the server never waits for us.
//!
//! The protocol state ([`State`]) is pure: bytes in, bytes out and call outcomes, unit-tested
//! frame by frame; [`UnaryConnection`] is the socket around it.
//!
//! Each answer carries the kernel's receive time of the read that completed it
//! (`SO_TIMESTAMPNS`), so its latency does not include the time the worker's own runtime took
//! to get round to reading it (a busy or descheduled client thread is not a slow server).

use super::receive_stamp::{recv_stamped, stamp_instant};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::collections::HashMap;
use std::future::Future;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Instant, SystemTime};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::Notify;
use tonic::Status;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
const SETTINGS_ENABLE_PUSH: u16 = 0x2;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;

const CANCEL: u32 = 0x8;

/// The largest flow-control window HTTP/2 allows (2^31 − 1).
const MAX_WINDOW: u32 = (1 << 31) - 1;
/// Frames we accept: large responses come in few frames.
const OUR_MAX_FRAME: usize = 1 << 20;
/// The HPACK dynamic table we let the server use (the protocol's default).
const OUR_HEADER_TABLE: usize = 4096;
/// A response header block larger than this is a broken peer.
const MAX_HEADER_BLOCK: usize = 1 << 20;
/// Stream ids are odd and below 2^31; a connection that used them all takes no new calls.
const LAST_STREAM_ID: u32 = MAX_WINDOW;

/// One call in flight.
struct Call {
    /// Request bytes still waiting for flow-control credit.
    pending: Bytes,
    /// Our send window on this stream.
    window: i64,
    /// The response HEADERS came (status 200).
    headers_seen: bool,
    /// The response message's bytes; one DATA frame is the usual case, kept without a copy.
    first: Option<Bytes>,
    more: BytesMut,
    outcome: Option<Result<Bytes, Status>>,
    /// The kernel's receive time of the read that brought the outcome.
    arrived: Option<Instant>,
    waker: Option<Waker>,
}

/// A call's answer: the response message, and when the read that completed it reached this
/// host (the kernel's receive time; `None` where the socket gave none).
#[derive(Debug, Clone)]
pub struct Answer {
    pub message: Bytes,
    pub arrived: Option<Instant>,
    /// Just before the call's frames were handed to the kernel ([`UnaryConnection::call_with`];
    /// `None` where they were not written at once).
    pub sent: Option<Instant>,
}

impl Call {
    fn body_len(&self) -> usize {
        if self.more.is_empty() {
            self.first.as_ref().map_or(0, Bytes::len)
        } else {
            self.more.len()
        }
    }

    fn take_body(&mut self) -> Bytes {
        if self.more.is_empty() {
            self.first.take().unwrap_or_default()
        } else {
            std::mem::take(&mut self.more).freeze()
        }
    }
}

/// A header block being received (HEADERS then CONTINUATION frames).
struct PartialBlock {
    stream: u32,
    end_stream: bool,
    block: BytesMut,
}

/// The protocol state of one connection: bytes to write (`out`), calls by stream id, and the
/// peer's settings. Pure: the socket is the caller's.
pub struct State {
    pub out: BytesMut,
    calls: HashMap<u32, Call>,
    next_stream: u32,
    /// The peer's first SETTINGS came: until then no stream opens, since its limits are unknown
    /// (a server taking fewer streams than we opened refuses the rest).
    settings_seen: bool,
    /// The peer's SETTINGS_MAX_CONCURRENT_STREAMS (unlimited when it does not say).
    max_streams: usize,
    /// The peer's SETTINGS_INITIAL_WINDOW_SIZE: each new stream's send window.
    initial_window: i64,
    /// Our send window on the connection.
    send_window: i64,
    /// The peer's SETTINGS_MAX_FRAME_SIZE.
    max_frame: usize,
    /// Bytes received since our connection window was last topped up.
    received: u64,
    decoder: loona_hpack::Decoder<'static>,
    partial: Option<PartialBlock>,
    /// The connection ended: why. No call is opened on it after that.
    closed: Option<String>,
    /// GOAWAY's last stream id: streams above it were never served.
    goaway: Option<u32>,
    /// `:method POST`, `:scheme http` and the fields after `:path` (`:authority`,
    /// `content-type`, `te`), encoded once.
    fixed_fields: Bytes,
    /// Calls waiting for a stream (the peer's concurrency limit reached).
    waiting: Vec<Waker>,
    /// Wakers to call once the lock is released.
    pub to_wake: Vec<Waker>,
    /// The kernel's receive time of the bytes [`State::receive`] is handling (`None`: unknown).
    arrived: Option<Instant>,
    /// Calls given an outcome by the peer's frames, ever: what one read answered.
    answered: u64,
    /// Calls without an outcome yet.
    unanswered: usize,
}

fn frame_header(out: &mut BytesMut, len: usize, kind: u8, flags: u8, stream: u32) {
    out.put_uint(len as u64, 3);
    out.put_u8(kind);
    out.put_u8(flags);
    out.put_u32(stream);
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541 §5.1); `first` holds the prefix's flags.
fn hpack_int(out: &mut BytesMut, first: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.put_u8(first | value as u8);
        return;
    }
    out.put_u8(first | max as u8);
    value -= max;
    while value >= 128 {
        out.put_u8((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.put_u8(value as u8);
}

/// A literal field without indexing, its name from the static table (RFC 7541 §6.2.2).
fn literal_indexed_name(out: &mut BytesMut, name_index: usize, value: &[u8]) {
    hpack_int(out, 0x00, 4, name_index);
    hpack_int(out, 0x00, 7, value.len());
    out.put_slice(value);
}

/// A literal field without indexing, with a literal name.
fn literal_new_name(out: &mut BytesMut, name: &[u8], value: &[u8]) {
    out.put_u8(0x00);
    hpack_int(out, 0x00, 7, name.len());
    out.put_slice(name);
    hpack_int(out, 0x00, 7, value.len());
    out.put_slice(value);
}

// Static table indices (RFC 7541 Appendix A).
const STATIC_METHOD_POST: u8 = 3;
const STATIC_SCHEME_HTTP: u8 = 6;
const STATIC_PATH: usize = 4;
const STATIC_AUTHORITY: usize = 1;
const STATIC_CONTENT_TYPE: usize = 31;

/// The server broke HTTP/2 (a connection error): the connection closes with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("HTTP/2 protocol error from the server: {0}")]
pub struct ProtocolViolation(String);

fn connection_error(what: impl std::fmt::Display) -> ProtocolViolation {
    ProtocolViolation(what.to_string())
}

/// Why a connection takes no new call: nothing was sent, so a new connection may serve it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallRefused {
    /// The connection ended, for this reason.
    #[error("{0}")]
    Closed(String),
    #[error("the connection takes no new streams (GOAWAY or stream ids used up)")]
    NoNewStreams,
}

impl State {
    /// A new connection's state, with the client preface, our SETTINGS and the connection
    /// window's top-up queued in `out`.
    pub fn new(authority: &str) -> Self {
        let mut out = BytesMut::with_capacity(4096);
        out.put_slice(PREFACE);
        let settings: [(u16, u32); 4] = [
            (SETTINGS_ENABLE_PUSH, 0),
            (SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW),
            (SETTINGS_MAX_FRAME_SIZE, OUR_MAX_FRAME as u32),
            (SETTINGS_HEADER_TABLE_SIZE, OUR_HEADER_TABLE as u32),
        ];
        frame_header(&mut out, settings.len() * 6, SETTINGS, 0, 0);
        for (id, value) in settings {
            out.put_u16(id);
            out.put_u32(value);
        }
        frame_header(&mut out, 4, WINDOW_UPDATE, 0, 0);
        out.put_u32(MAX_WINDOW - 65_535);

        let mut fixed = BytesMut::new();
        literal_indexed_name(&mut fixed, STATIC_AUTHORITY, authority.as_bytes());
        literal_indexed_name(&mut fixed, STATIC_CONTENT_TYPE, b"application/grpc");
        literal_new_name(&mut fixed, b"te", b"trailers");
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(OUR_HEADER_TABLE);
        Self {
            out,
            calls: HashMap::new(),
            next_stream: 1,
            settings_seen: false,
            max_streams: usize::MAX,
            initial_window: 65_535,
            send_window: 65_535,
            max_frame: 16_384,
            received: 0,
            decoder,
            partial: None,
            closed: None,
            goaway: None,
            fixed_fields: fixed.freeze(),
            waiting: Vec::new(),
            to_wake: Vec::new(),
            arrived: None,
            answered: 0,
            unanswered: 0,
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_some()
    }

    /// Whether a call opened now would leave at once (no wait for SETTINGS or a stream).
    fn opens_now(&self) -> bool {
        self.accepts_calls() && self.settings_seen && self.calls.len() < self.max_streams
    }

    /// Whether a new call may open a stream now.
    fn accepts_calls(&self) -> bool {
        self.closed.is_none() && self.goaway.is_none() && self.next_stream <= LAST_STREAM_ID
    }

    /// Opens a stream for a call to `path` with a framed gRPC message and queues its frames.
    /// `Pending` (with `cx` woken later) before the peer's SETTINGS and while its stream limit is
    /// reached; an error (why)
    /// when this connection takes no new calls: nothing was sent, a new connection may serve it.
    pub fn open(
        &mut self,
        path: &str,
        message: &Bytes,
        cx: &mut Context<'_>,
    ) -> Poll<Result<u32, CallRefused>> {
        self.open_with(path, &[], message, cx)
    }

    /// [`State::open`] with custom metadata (`(name, value)`, names in lowercase), sent as
    /// literal fields after the fixed ones, so a value ends the header block.
    pub fn open_with(
        &mut self,
        path: &str,
        metadata: &[(&str, &str)],
        message: &Bytes,
        cx: &mut Context<'_>,
    ) -> Poll<Result<u32, CallRefused>> {
        if !self.accepts_calls() {
            return Poll::Ready(Err(self
                .closed
                .clone()
                .map_or(CallRefused::NoNewStreams, CallRefused::Closed)));
        }
        if !self.settings_seen || self.calls.len() >= self.max_streams {
            self.waiting.push(cx.waker().clone());
            return Poll::Pending;
        }
        let id = self.next_stream;
        self.next_stream += 2;
        let mut block = BytesMut::with_capacity(self.fixed_fields.len() + path.len() + 4);
        block.put_u8(0x80 | STATIC_METHOD_POST);
        block.put_u8(0x80 | STATIC_SCHEME_HTTP);
        literal_indexed_name(&mut block, STATIC_PATH, path.as_bytes());
        block.put_slice(&self.fixed_fields);
        for (name, value) in metadata {
            literal_new_name(&mut block, name.as_bytes(), value.as_bytes());
        }
        self.put_header_block(id, &block, message.is_empty());
        self.unanswered += 1;
        self.calls.insert(
            id,
            Call {
                pending: message.clone(),
                window: self.initial_window,
                headers_seen: false,
                first: None,
                more: BytesMut::new(),
                outcome: None,
                arrived: None,
                waker: None,
            },
        );
        self.send_pending(id);
        Poll::Ready(Ok(id))
    }

    /// HEADERS (and CONTINUATION frames past the peer's frame size).
    fn put_header_block(&mut self, id: u32, block: &[u8], end_stream: bool) {
        let mut chunks = block.chunks(self.max_frame).peekable();
        let first = chunks.next().unwrap_or(&[]);
        let flags = (if end_stream { END_STREAM } else { 0 })
            | (if chunks.peek().is_none() {
                END_HEADERS
            } else {
                0
            });
        frame_header(&mut self.out, first.len(), HEADERS, flags, id);
        self.out.put_slice(first);
        while let Some(chunk) = chunks.next() {
            let flags = if chunks.peek().is_none() {
                END_HEADERS
            } else {
                0
            };
            frame_header(&mut self.out, chunk.len(), CONTINUATION, flags, id);
            self.out.put_slice(chunk);
        }
    }

    /// Queues as much of a call's request body as the windows allow, in frames the peer accepts.
    fn send_pending(&mut self, id: u32) {
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        while !call.pending.is_empty() {
            let credit = call.window.min(self.send_window).min(self.max_frame as i64);
            if credit <= 0 {
                return;
            }
            let n = (credit as usize).min(call.pending.len());
            let chunk = call.pending.split_to(n);
            call.window -= n as i64;
            self.send_window -= n as i64;
            let flags = if call.pending.is_empty() {
                END_STREAM
            } else {
                0
            };
            frame_header(&mut self.out, n, DATA, flags, id);
            self.out.put_slice(&chunk);
        }
    }

    /// Every call waiting for credit, after a window grew.
    fn send_all_pending(&mut self) {
        let ids: Vec<u32> = self
            .calls
            .iter()
            .filter(|(_, c)| !c.pending.is_empty())
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.send_pending(id);
        }
    }

    /// A call's outcome once it has one; `cx` is woken when it comes.
    pub fn poll_call(&mut self, id: u32, cx: &mut Context<'_>) -> Poll<Result<Bytes, Status>> {
        self.poll_answer(id, cx)
            .map(|answer| answer.map(|answer| answer.message))
    }

    /// [`State::poll_call`] with the answer's receive time.
    pub fn poll_answer(&mut self, id: u32, cx: &mut Context<'_>) -> Poll<Result<Answer, Status>> {
        let Some(call) = self.calls.get_mut(&id) else {
            return Poll::Ready(Err(Status::internal("the call was already answered")));
        };
        match call.outcome.take() {
            Some(outcome) => {
                let arrived = call.arrived;
                self.calls.remove(&id);
                self.wake_one_waiting();
                Poll::Ready(outcome.map(|message| Answer {
                    message,
                    arrived,
                    sent: None,
                }))
            }
            None => {
                if !call.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    call.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }

    /// A call given up by its caller (a deadline): the server is told with RST_STREAM(CANCEL)
    /// unless the stream already ended.
    pub fn cancel(&mut self, id: u32) {
        if let Some(call) = self.calls.remove(&id) {
            if call.outcome.is_none() {
                self.unanswered -= 1;
            }
            if call.outcome.is_none() && self.closed.is_none() {
                frame_header(&mut self.out, 4, RST_STREAM, 0, id);
                self.out.put_u32(CANCEL);
            }
            self.wake_one_waiting();
        }
    }

    fn wake_one_waiting(&mut self) {
        if let Some(waker) = self.waiting.pop() {
            self.to_wake.push(waker);
        }
    }

    fn finish(&mut self, id: u32, outcome: Result<Bytes, Status>) {
        if let Some(call) = self.calls.get_mut(&id)
            && call.outcome.is_none()
        {
            call.pending.clear();
            call.outcome = Some(outcome);
            self.unanswered -= 1;
            call.arrived = self.arrived;
            self.answered += 1;
            if let Some(waker) = call.waker.take() {
                self.to_wake.push(waker);
            }
        }
    }

    /// The connection ended (`why`): every call without an outcome fails, and so does every
    /// later `open`.
    pub fn close(&mut self, why: &str) {
        if self.closed.is_none() {
            self.closed = Some(why.to_string());
        }
        let ids: Vec<u32> = self.calls.keys().copied().collect();
        for id in ids {
            self.finish(id, Err(Status::unavailable(why.to_string())));
        }
        self.to_wake.append(&mut self.waiting);
    }

    /// [`State::receive`] of the bytes of one read, `arrived` the kernel's receive time of its
    /// last segment. Returns how many calls it answered and how many of those have an
    /// uncertain receive time: every one but the last, which the read's time is exactly when
    /// the read ends with it ([`UnaryConnection::read_now`] cuts its reads so); the others
    /// arrived earlier and are given that time, a little late.
    pub fn receive_stamped(
        &mut self,
        input: &mut BytesMut,
        arrived: Option<Instant>,
    ) -> Result<(u64, u64), ProtocolViolation> {
        let before = self.answered;
        self.arrived = arrived;
        self.receive(input)?;
        let answered = self.answered - before;
        Ok((answered, answered.saturating_sub(1)))
    }

    /// Handles every complete frame at the front of `input`, leaving a partial one there. An
    /// error is a connection error: the caller closes the connection with it.
    pub fn receive(&mut self, input: &mut BytesMut) -> Result<(), ProtocolViolation> {
        while input.len() >= 9 {
            let len = (usize::from(input[0]) << 16)
                | (usize::from(input[1]) << 8)
                | usize::from(input[2]);
            if len > OUR_MAX_FRAME {
                return Err(connection_error(format!(
                    "a frame of {len} bytes (we allow {OUR_MAX_FRAME})"
                )));
            }
            if input.len() < 9 + len {
                input.reserve(9 + len - input.len());
                return Ok(());
            }
            let mut frame = input.split_to(9 + len).freeze();
            let kind = frame[3];
            let flags = frame[4];
            let stream = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & MAX_WINDOW;
            frame.advance(9);
            self.on_frame(kind, flags, stream, frame)?;
        }
        Ok(())
    }

    fn on_frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        payload: Bytes,
    ) -> Result<(), ProtocolViolation> {
        if self.partial.is_some() {
            return self.on_continuation(kind, flags, stream, &payload);
        }
        match kind {
            DATA => self.on_data_frame(flags, stream, payload)?,
            HEADERS => self.on_headers_frame(flags, stream, payload)?,
            RST_STREAM => self.on_rst_stream(stream, &payload)?,
            SETTINGS if flags & ACK == 0 => self.on_settings_frame(&payload)?,
            PUSH_PROMISE => return Err(connection_error("PUSH_PROMISE although push is off")),
            PING => self.on_ping(flags, &payload)?,
            GOAWAY => self.on_goaway(&payload)?,
            WINDOW_UPDATE => self.on_window_update(stream, &payload)?,
            CONTINUATION => return Err(connection_error("CONTINUATION without HEADERS")),
            // PRIORITY and unknown frame types are ignored (RFC 9113 §4.1, §5.3.2).
            _ => {}
        }
        Ok(())
    }

    /// A frame while a header block is open: only its CONTINUATION may come.
    fn on_continuation(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        payload: &[u8],
    ) -> Result<(), ProtocolViolation> {
        let partial = self.partial.as_mut().expect("a header block is open");
        if kind != CONTINUATION || stream != partial.stream {
            return Err(connection_error(
                "a header block interrupted by another frame",
            ));
        }
        partial.block.put_slice(payload);
        if partial.block.len() > MAX_HEADER_BLOCK {
            return Err(connection_error("a header block over 1 MiB"));
        }
        if flags & END_HEADERS != 0 {
            let partial = self.partial.take().expect("checked above");
            self.on_header_block(partial.stream, &partial.block, partial.end_stream)?;
        }
        Ok(())
    }

    #[inline]
    fn on_data_frame(
        &mut self,
        flags: u8,
        stream: u32,
        payload: Bytes,
    ) -> Result<(), ProtocolViolation> {
        if stream == 0 {
            return Err(connection_error("DATA on stream 0"));
        }
        // Flow control counts the whole payload, padding included.
        self.received += payload.len() as u64;
        if self.received >= u64::from(MAX_WINDOW / 2) {
            frame_header(&mut self.out, 4, WINDOW_UPDATE, 0, 0);
            self.out.put_u32(self.received as u32);
            self.received = 0;
        }
        let data = unpad(payload, flags)?;
        self.on_data(stream, data, flags & END_STREAM != 0);
        Ok(())
    }

    #[inline]
    fn on_headers_frame(
        &mut self,
        flags: u8,
        stream: u32,
        payload: Bytes,
    ) -> Result<(), ProtocolViolation> {
        if stream == 0 {
            return Err(connection_error("HEADERS on stream 0"));
        }
        let mut block = unpad(payload, flags)?;
        if flags & PRIORITY_FLAG != 0 {
            if block.len() < 5 {
                return Err(connection_error(
                    "a HEADERS frame too short for its priority",
                ));
            }
            block.advance(5);
        }
        let end_stream = flags & END_STREAM != 0;
        if flags & END_HEADERS != 0 {
            self.on_header_block(stream, &block, end_stream)?;
        } else {
            self.partial = Some(PartialBlock {
                stream,
                end_stream,
                block: BytesMut::from(&block[..]),
            });
        }
        Ok(())
    }

    fn on_rst_stream(&mut self, stream: u32, payload: &[u8]) -> Result<(), ProtocolViolation> {
        if payload.len() != 4 {
            return Err(connection_error("RST_STREAM of a wrong size"));
        }
        let code = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
        self.finish(
            stream,
            Err(Status::unavailable(format!(
                "the server reset the stream ({})",
                error_code_name(code)
            ))),
        );
        Ok(())
    }

    /// A SETTINGS frame that is not an ACK: applied, then acknowledged.
    fn on_settings_frame(&mut self, payload: &[u8]) -> Result<(), ProtocolViolation> {
        self.on_settings(payload)?;
        frame_header(&mut self.out, 0, SETTINGS, ACK, 0);
        // Only now may bodies use a changed window or frame size: the peer counts from
        // the settings we have acknowledged (chttp2 resets a stream that overflows them).
        self.send_all_pending();
        if !self.settings_seen {
            self.settings_seen = true;
            self.to_wake.append(&mut self.waiting);
        }
        Ok(())
    }

    fn on_ping(&mut self, flags: u8, payload: &[u8]) -> Result<(), ProtocolViolation> {
        if payload.len() != 8 {
            return Err(connection_error("PING of a wrong size"));
        }
        if flags & ACK == 0 {
            frame_header(&mut self.out, 8, PING, ACK, 0);
            self.out.put_slice(payload);
        }
        Ok(())
    }

    fn on_goaway(&mut self, payload: &[u8]) -> Result<(), ProtocolViolation> {
        if payload.len() < 8 {
            return Err(connection_error("GOAWAY too short"));
        }
        let last =
            u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & MAX_WINDOW;
        let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
        let debug = String::from_utf8_lossy(&payload[8..]);
        self.goaway = Some(last);
        let unserved: Vec<u32> = self.calls.keys().copied().filter(|id| *id > last).collect();
        for id in unserved {
            self.finish(
                id,
                Err(Status::unavailable(format!(
                    "the server sent GOAWAY ({}{}{}) before serving the call",
                    error_code_name(code),
                    if debug.is_empty() { "" } else { ": " },
                    debug
                ))),
            );
        }
        self.to_wake.append(&mut self.waiting);
        Ok(())
    }

    #[inline]
    fn on_window_update(&mut self, stream: u32, payload: &[u8]) -> Result<(), ProtocolViolation> {
        if payload.len() != 4 {
            return Err(connection_error("WINDOW_UPDATE of a wrong size"));
        }
        let increment = i64::from(
            u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & MAX_WINDOW,
        );
        if stream == 0 {
            self.send_window += increment;
            if self.send_window > i64::from(MAX_WINDOW) {
                return Err(connection_error("the connection window overflowed"));
            }
            self.send_all_pending();
        } else if let Some(call) = self.calls.get_mut(&stream) {
            call.window += increment;
            self.send_pending(stream);
        }
        Ok(())
    }

    fn on_settings(&mut self, payload: &[u8]) -> Result<(), ProtocolViolation> {
        if !payload.len().is_multiple_of(6) {
            return Err(connection_error("SETTINGS of a wrong size"));
        }
        for setting in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([setting[0], setting[1]]);
            let value = u32::from_be_bytes([setting[2], setting[3], setting[4], setting[5]]);
            match id {
                SETTINGS_MAX_CONCURRENT_STREAMS => {
                    self.max_streams = usize::try_from(value).unwrap_or(usize::MAX);
                    // A raised limit lets waiting calls in.
                    self.to_wake.append(&mut self.waiting);
                }
                SETTINGS_INITIAL_WINDOW_SIZE => {
                    if value > MAX_WINDOW {
                        return Err(connection_error("an initial window over 2^31-1"));
                    }
                    let delta = i64::from(value) - self.initial_window;
                    self.initial_window = i64::from(value);
                    for call in self.calls.values_mut() {
                        call.window += delta;
                    }
                }
                SETTINGS_MAX_FRAME_SIZE => {
                    if !(16_384..=16_777_215).contains(&value) {
                        return Err(connection_error(format!("a max frame size of {value}")));
                    }
                    self.max_frame = value as usize;
                }
                // Our header blocks never index, so the peer's table size does not bind us.
                _ => {}
            }
        }
        Ok(())
    }

    fn on_header_block(
        &mut self,
        stream: u32,
        block: &[u8],
        end_stream: bool,
    ) -> Result<(), ProtocolViolation> {
        // Every block is decoded, even one for a call given up, to keep the HPACK table in step.
        let mut status: Option<u16> = None;
        let mut grpc_status: Option<Vec<u8>> = None;
        let mut grpc_message: Option<Vec<u8>> = None;
        self.decoder
            .decode_with_cb(block, |name, value| match &*name {
                b":status" => {
                    status = std::str::from_utf8(&value)
                        .ok()
                        .and_then(|s| s.parse().ok());
                }
                b"grpc-status" => grpc_status = Some(value.into_owned()),
                b"grpc-message" => grpc_message = Some(value.into_owned()),
                _ => {}
            })
            .map_err(|e| connection_error(format!("HPACK: {e:?}")))?;
        let Some(call) = self.calls.get_mut(&stream) else {
            return Ok(());
        };
        if call.outcome.is_some() {
            return Ok(());
        }
        if !call.headers_seen {
            match status {
                Some(200) => call.headers_seen = true,
                other => {
                    let status = other.map_or("none".to_string(), |s| s.to_string());
                    self.finish(
                        stream,
                        Err(Status::unknown(format!(
                            "HTTP status {status} instead of a gRPC response"
                        ))),
                    );
                    self.cancel_stream_if_open(stream, end_stream);
                    return Ok(());
                }
            }
            if !end_stream {
                return Ok(());
            }
            // Trailers-only: the outcome (an error) is in these headers.
        } else if !end_stream {
            return Ok(());
        }
        let outcome = match grpc_status.as_deref() {
            Some(b"0") => {
                let body = call.take_body();
                super::grpc_frame::message_of(body)
            }
            Some(code) => Err(status_of(code, grpc_message.as_deref())),
            None => Err(Status::internal("response without grpc-status")),
        };
        self.finish(stream, outcome);
        Ok(())
    }

    fn cancel_stream_if_open(&mut self, stream: u32, ended: bool) {
        if !ended && self.closed.is_none() {
            frame_header(&mut self.out, 4, RST_STREAM, 0, stream);
            self.out.put_u32(CANCEL);
        }
    }

    fn on_data(&mut self, stream: u32, data: Bytes, end_stream: bool) {
        let Some(call) = self.calls.get_mut(&stream) else {
            return;
        };
        if call.outcome.is_some() {
            return;
        }
        if !call.headers_seen {
            self.finish(
                stream,
                Err(Status::internal("DATA before the response headers")),
            );
            self.cancel_stream_if_open(stream, end_stream);
            return;
        }
        if !data.is_empty() {
            match &call.first {
                None if call.more.is_empty() => call.first = Some(data),
                _ => {
                    if call.more.is_empty()
                        && let Some(first) = call.first.take()
                    {
                        call.more.put_slice(&first);
                    }
                    call.more.put_slice(&data);
                }
            }
        }
        if call.body_len() > super::grpc_frame::MAX_MESSAGE + 5 {
            self.finish(
                stream,
                Err(Status::out_of_range(format!(
                    "response larger than {} bytes",
                    super::grpc_frame::MAX_MESSAGE
                ))),
            );
            self.cancel_stream_if_open(stream, end_stream);
            return;
        }
        if end_stream {
            self.finish(
                stream,
                Err(Status::internal("response without grpc-status")),
            );
        }
    }
}

fn unpad(mut payload: Bytes, flags: u8) -> Result<Bytes, ProtocolViolation> {
    if flags & PADDED == 0 {
        return Ok(payload);
    }
    if payload.is_empty() {
        return Err(connection_error("a padded frame without its pad length"));
    }
    let pad = usize::from(payload[0]);
    payload.advance(1);
    if pad > payload.len() {
        return Err(connection_error("padding longer than the frame"));
    }
    payload.truncate(payload.len() - pad);
    Ok(payload)
}

fn status_of(code: &[u8], message: Option<&[u8]>) -> Status {
    let mut headers = http::HeaderMap::new();
    if let Ok(code) = http::HeaderValue::from_bytes(code) {
        headers.insert("grpc-status", code);
    }
    if let Some(message) = message.and_then(|m| http::HeaderValue::from_bytes(m).ok()) {
        headers.insert("grpc-message", message);
    }
    Status::from_header_map(&headers)
        .unwrap_or_else(|| Status::internal("a response with an unreadable grpc-status"))
}

fn error_code_name(code: u32) -> String {
    let name = match code {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        _ => return format!("error code {code:#x}"),
    };
    name.into()
}

/// A lean HTTP/2 connection for unary gRPC calls. Callers write their own requests; a
/// connection task reads responses (and writes what a caller could not: a full socket buffer,
/// acknowledgements). Clones share the connection; it ends when the last is dropped.
#[derive(Clone)]
pub struct UnaryConnection {
    shared: Arc<Shared>,
    _stop: Arc<StopOnDrop>,
}

struct Shared {
    address: String,
    state: Mutex<State>,
    /// The read side: the connection task reads, and so does an open loop's pacer while reads
    /// are deferred; one at a time. Locked before `state`.
    reader: Mutex<Reader>,
    write: OwnedWriteHalf,
    /// The connection task has bytes to write that a caller could not.
    flush: Notify,
    stop: Notify,
}

struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop.notify_one();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_reader(&self) -> MutexGuard<'_, Reader> {
        self.reader.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Handles what `read` (one read into the reader's input) brought; the wakers of the calls
    /// it answered go to `wakers`. Ok(None): nothing to read now; Ok(Some((answered,
    /// uncertain))): how many calls it answered and how many of those have an uncertain
    /// receive time ([`State::receive_stamped`]); Err: why the connection ended (closed here).
    fn handle_read(
        &self,
        reader: &mut Reader,
        read: std::io::Result<Option<(usize, Option<SystemTime>)>>,
        wakers: &mut Vec<Waker>,
    ) -> Result<Option<(u64, u64)>, String> {
        let arrived = match read {
            Ok(Some((_, stamp))) => stamp.and_then(stamp_instant),
            Ok(None) => {
                let why = format!("{}: the server closed the connection", self.address);
                self.close(&why, wakers);
                return Err(why);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) =>
            {
                return Ok(None);
            }
            Err(e) => {
                let why = format!("{}: reading: {e}", self.address);
                self.close(&why, wakers);
                return Err(why);
            }
        };
        let mut state = self.lock();
        match state.receive_stamped(&mut reader.input, arrived) {
            Ok(counts) => {
                self.write_out(&mut state);
                wakers.append(&mut state.to_wake);
                Ok(Some(counts))
            }
            Err(e) => {
                let why = format!("{}: {e}", self.address);
                state.close(&why);
                wakers.append(&mut state.to_wake);
                Err(why)
            }
        }
    }

    fn close(&self, why: &str, wakers: &mut Vec<Waker>) {
        let mut state = self.lock();
        state.close(why);
        wakers.append(&mut state.to_wake);
    }

    /// Writes what the socket takes now of `state.out`; the connection task is asked to write
    /// the rest when the socket can take it.
    fn write_out(&self, state: &mut State) {
        while !state.out.is_empty() {
            match self.write.try_write(&state.out) {
                Ok(n) => state.out.advance(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.flush.notify_one();
                    return;
                }
                Err(e) => {
                    let why = format!("{}: writing: {e}", self.address);
                    state.out.clear();
                    state.close(&why);
                    return;
                }
            }
        }
    }

    /// Wakes what `state` collected, after its lock is released.
    fn wake(wakers: Vec<Waker>) {
        for waker in wakers {
            waker.wake();
        }
    }
}

impl UnaryConnection {
    /// Starts HTTP/2 on a connected socket (`authority`: the server's host:port) and spawns the
    /// connection task on the current runtime.
    pub fn start(tcp: TcpStream, authority: &str) -> Self {
        // Best effort: without it answers are timed when read.
        if let Err(e) = super::receive_stamp::enable(&tcp) {
            tracing::debug!("{authority}: no kernel receive timestamps: {e}");
        }
        let (read, write) = tcp.into_split();
        let shared = Arc::new(Shared {
            address: authority.to_string(),
            state: Mutex::new(State::new(authority)),
            reader: Mutex::new(Reader::new()),
            write,
            flush: Notify::new(),
            stop: Notify::new(),
        });
        {
            let mut state = shared.lock();
            shared.write_out(&mut state);
        }
        tokio::spawn(drive(shared.clone(), read));
        Self {
            _stop: Arc::new(StopOnDrop(shared.clone())),
            shared,
        }
    }

    pub fn is_closed(&self) -> bool {
        let state = self.shared.lock();
        !state.accepts_calls()
    }

    /// Defers reads (`on`): answers then wait in the socket, without waking the connection
    /// task, until [`Self::read_now`] reads them (an open loop's pacer, at its own wakes).
    /// Undeferring makes the kernel signal what waits, so the connection task reads it. False
    /// if reads cannot be deferred (the socket refused the option). A closed connection, the
    /// peer's FIN or an error still wake the connection task at once.
    pub fn defer_reads(&self, on: bool) -> bool {
        let low_water = if on { DEFERRED_LOW_WATER } else { 1 };
        let socket: &TcpStream = self.shared.write.as_ref();
        match nix::sys::socket::setsockopt(socket, low_water::ReceiveLowWater, &low_water) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!("{}: reads not deferred: {e}", self.shared.address);
                false
            }
        }
    }

    /// Reads and handles what the socket holds now, from any thread; the wakers of the calls
    /// answered go to `wakers` (the caller wakes them). TCP gives one receive time per read,
    /// that of the last segment it took, so a peek at what waits finds where each answer ends
    /// and the reads stop there: an answer gets the time of the segment that completed it,
    /// also when a WINDOW_UPDATE came before it or other answers wait behind it. Returns how
    /// many answers had an uncertain receive time: those whose segment the kernel merged with
    /// a later answer's while they waited (it then keeps only the later time, which two reads
    /// returning the same time show), and those a read took beyond its cut. A control frame
    /// that came in later than the answer before it and was merged with it is not seen: the
    /// answer then takes its time (an open loop's pacer reads before it sends, so the next
    /// request's WINDOW_UPDATE is not yet there). A partial frame at the end stays in the
    /// socket for a later read.
    pub fn read_now(&self, wakers: &mut Vec<Waker>) -> super::AnswersRead {
        let uncertain = self.read_waiting(wakers);
        super::AnswersRead {
            uncertain,
            unanswered: self.unanswered(),
        }
    }

    /// Whether a call started now would leave at once (the server's SETTINGS came; the
    /// connection takes calls).
    pub fn is_ready(&self) -> bool {
        let state = self.shared.lock();
        state.accepts_calls() && state.settings_seen
    }

    /// Whether `other` is a clone of this connection.
    pub fn same_as(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Calls waiting for their answer.
    pub fn unanswered(&self) -> usize {
        self.shared.lock().unanswered
    }

    /// [`Self::read_now`]'s reads: how many answers had an uncertain receive time.
    fn read_waiting(&self, wakers: &mut Vec<Waker>) -> u64 {
        let socket: &TcpStream = self.shared.write.as_ref();
        let mut reader = self.shared.lock_reader();
        let mut uncertain = 0;
        // The previous read's receive time (as the kernel gave it) and how many answers read
        // with that time are not yet said to be uncertain.
        let mut previous: Option<(SystemTime, u64)> = None;
        loop {
            let waiting = match reader.peek(socket) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return uncertain,
                Ok(0) | Err(_) => {
                    // The end or an error: the read says which.
                    let read = reader.receive(socket, usize::MAX);
                    if let Ok(Some((_, n))) = self.shared.handle_read(&mut reader, read, wakers) {
                        uncertain += n;
                    }
                    return uncertain;
                }
                Ok(waiting) => waiting,
            };
            let Reader {
                input,
                scratch,
                ends,
                ..
            } = &mut *reader;
            read_ends(input, &scratch[..waiting], ends);
            if ends.is_empty() {
                // No whole frame yet (or one larger than the peek): take what there is.
                ends.push(waiting);
            }
            let ends = std::mem::take(&mut reader.ends);
            let mut start = 0;
            let mut as_cut = true;
            for &end in &ends {
                let read = reader.receive(socket, end - start);
                let stamp = match &read {
                    Ok(Some((n, stamp))) => {
                        as_cut = *n == end - start;
                        *stamp
                    }
                    _ => None,
                };
                let (answered, beyond_cut) =
                    match self.shared.handle_read(&mut reader, read, wakers) {
                        Ok(Some(counts)) => counts,
                        Ok(None) | Err(_) => return uncertain,
                    };
                uncertain += beyond_cut;
                // The same time as the previous read's: one segment, or segments the kernel
                // merged, keeping the later's time. Merged answers are uncertain; a control frame
                // (a WINDOW_UPDATE) is written with the answer before it, as Triton does.
                match previous {
                    Some((before, merged)) if stamp == Some(before) && answered > 0 => {
                        uncertain += merged;
                        previous = Some((before, answered));
                    }
                    Some((before, _)) if stamp == Some(before) => {}
                    _ => previous = stamp.map(|stamp| (stamp, answered)),
                }
                if !as_cut {
                    break;
                }
                start = end;
            }
            reader.ends = ends;
            if as_cut && waiting < reader.scratch.len() {
                return uncertain;
            }
        }
    }

    /// One unary call: `path` is the gRPC method's, `message` the framed request message. The
    /// outer error means nothing was sent (this connection takes no new calls: why); the inner
    /// one is the call's outcome.
    pub async fn call(
        &self,
        path: &str,
        message: Bytes,
    ) -> Result<Result<Answer, Status>, CallRefused> {
        self.call_with(path, &[], message).await
    }

    /// [`UnaryConnection::call`] with custom metadata ([`State::open_with`]).
    pub async fn call_with(
        &self,
        path: &str,
        metadata: &[(&str, &str)],
        message: Bytes,
    ) -> Result<Result<Answer, Status>, CallRefused> {
        let mut sent = None;
        let id = std::future::poll_fn(|cx| {
            let mut state = self.shared.lock();
            let opened = state.open_with(path, metadata, &message, cx);
            if opened.is_ready() {
                // Taken just before the write, so never after the server had the call (a
                // clock bound of the report's join), and the write follows unless the socket
                // is full (then the connection's task writes it later: unknown).
                let before = Instant::now();
                self.shared.write_out(&mut state);
                sent = state.out.is_empty().then_some(before);
            }
            let wakers = std::mem::take(&mut state.to_wake);
            drop(state);
            Shared::wake(wakers);
            opened
        })
        .await?;
        let answer = StartedCall {
            shared: self.shared.clone(),
            id,
            done: false,
        }
        .await;
        Ok(answer.map(|a| Answer { sent, ..a }))
    }

    /// Sends a call now, from any thread, without waiting: `None` when it cannot leave at once
    /// (the connection is closed or new, or the server's stream limit is reached).
    pub fn try_start(&self, path: &str, message: &Bytes) -> Option<StartedCall> {
        let mut state = self.shared.lock();
        if !state.opens_now() {
            return None;
        }
        let Poll::Ready(Ok(id)) =
            state.open(path, message, &mut Context::from_waker(Waker::noop()))
        else {
            return None;
        };
        self.shared.write_out(&mut state);
        let wakers = std::mem::take(&mut state.to_wake);
        drop(state);
        Shared::wake(wakers);
        Some(StartedCall {
            shared: self.shared.clone(),
            id,
            done: false,
        })
    }
}

/// A call on the wire: its response to come. Dropping it before cancels the stream.
pub struct StartedCall {
    shared: Arc<Shared>,
    id: u32,
    done: bool,
}

impl Future for StartedCall {
    type Output = Result<Answer, Status>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.shared.lock();
        let polled = state.poll_answer(self.id, cx);
        let wakers = std::mem::take(&mut state.to_wake);
        drop(state);
        Shared::wake(wakers);
        if polled.is_ready() {
            self.done = true;
        }
        polled
    }
}

impl Drop for StartedCall {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = self.shared.lock();
        state.cancel(self.id);
        self.shared.write_out(&mut state);
        let wakers = std::mem::take(&mut state.to_wake);
        drop(state);
        Shared::wake(wakers);
    }
}

/// Reads a socket with the kernel's receive time of what it read.
struct Reader {
    /// Bytes read and not yet handled (a partial frame).
    input: BytesMut,
    scratch: Box<[u8]>,
    control: Vec<u8>,
    /// Where [`UnaryConnection::read_now`]'s reads end ([`read_ends`]).
    ends: Vec<usize>,
}

/// `SO_RCVLOWAT` while reads are deferred: more than an answer of most models, so answers do
/// not wake the connection task. A larger one still does (and so does a nearly full receive
/// window), which only costs that wake.
const DEFERRED_LOW_WATER: i32 = 256 << 10;

/// `SO_RCVLOWAT`, which nix does not define: its own macro defines it, without `unsafe` here.
mod low_water {
    use nix::libc;
    use nix::{getsockopt_impl, setsockopt_impl, sockopt_impl};
    sockopt_impl!(
        /// The bytes a socket holds before it reads as readable (`SO_RCVLOWAT`).
        ReceiveLowWater,
        Both,
        libc::SOL_SOCKET,
        libc::SO_RCVLOWAT,
        i32
    );
}

impl Reader {
    fn new() -> Self {
        Self {
            input: BytesMut::with_capacity(64 << 10),
            scratch: vec![0; 64 << 10].into_boxed_slice(),
            control: nix::cmsg_space!(nix::sys::time::TimeSpec),
            ends: Vec::new(),
        }
    }

    /// One non-blocking read of at most `max` bytes into `input`: `None` at the end of the
    /// stream, else how many bytes came and the kernel's receive time of the last segment they
    /// came from (TCP gives one stamp per read), when it gave one.
    fn receive(
        &mut self,
        socket: &TcpStream,
        max: usize,
    ) -> std::io::Result<Option<(usize, Option<SystemTime>)>> {
        let max = max.min(self.scratch.len());
        let (read, stamp) = recv_stamped(
            socket,
            &mut self.scratch[..max],
            &mut self.control,
            nix::sys::socket::MsgFlags::MSG_DONTWAIT,
        )?;
        if read == 0 {
            return Ok(None);
        }
        self.input.extend_from_slice(&self.scratch[..read]);
        Ok(Some((read, stamp)))
    }

    /// Copies what waits in the socket into `scratch` without taking it: how many bytes (0 at
    /// the end of the stream).
    fn peek(&mut self, socket: &TcpStream) -> std::io::Result<usize> {
        use nix::sys::socket::{MsgFlags, recv};
        recv(
            socket.as_raw_fd(),
            &mut self.scratch,
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_PEEK,
        )
        .map_err(std::io::Error::from)
    }
}

/// Where reads of `waiting` (bytes in the socket, after `partial`: the start of a frame read
/// before) should end so that each read ends with an answer, and its receive time is that
/// answer's: just past each frame that ends a stream (END_STREAM, also in a header block's
/// last CONTINUATION; RST_STREAM; GOAWAY) and the control frames right behind it (a server
/// writes a WINDOW_UPDATE with the answer; one the kernel merged into the answer's segment
/// would give it its time anyway), then past the last whole frame (an answer's first frames
/// go in a read of their own). Offsets into `waiting`, in `ends`; none if no frame is whole.
fn read_ends(partial: &[u8], waiting: &[u8], ends: &mut Vec<usize>) {
    ends.clear();
    let byte = |i: usize| {
        if i < partial.len() {
            partial[i]
        } else {
            waiting[i - partial.len()]
        }
    };
    let total = partial.len() + waiting.len();
    let (mut at, mut last_whole) = (0, 0);
    // A HEADERS frame ending its stream whose header block goes on in CONTINUATION frames.
    let mut block_ends_stream = false;
    while at + 9 <= total {
        let len = (usize::from(byte(at)) << 16)
            | (usize::from(byte(at + 1)) << 8)
            | usize::from(byte(at + 2));
        let end = at + 9 + len;
        if end > total {
            break;
        }
        let (kind, flags) = (byte(at + 3), byte(at + 4));
        let block_done = flags & END_HEADERS != 0;
        let stream_ends = match kind {
            DATA => flags & END_STREAM != 0,
            HEADERS => {
                block_ends_stream = flags & END_STREAM != 0 && !block_done;
                flags & END_STREAM != 0 && block_done
            }
            CONTINUATION => {
                let ends = block_ends_stream && block_done;
                block_ends_stream &= !block_done;
                ends
            }
            RST_STREAM | GOAWAY => true,
            _ => false,
        };
        // `partial` holds less than a frame, so every whole frame ends in `waiting`.
        let Some(end_in_waiting) = end.checked_sub(partial.len()).filter(|&e| e > 0) else {
            at = end;
            continue;
        };
        let answer_frame = matches!(kind, DATA | HEADERS | CONTINUATION);
        if stream_ends {
            ends.push(end_in_waiting);
        } else if !answer_frame && ends.last() == Some(&last_whole) {
            // Right behind an answer: read with it.
            *ends.last_mut().expect("checked") = end_in_waiting;
        }
        last_whole = end_in_waiting;
        at = end;
    }
    if last_whole > ends.last().copied().unwrap_or(0) {
        ends.push(last_whole);
    }
}

/// The connection task: reads and handles frames, writes what callers left, until the socket
/// ends, the peer breaks the protocol, or the last handle is dropped.
async fn drive(shared: Arc<Shared>, read: OwnedReadHalf) {
    let why = loop {
        let must_write = !shared.lock().out.is_empty();
        tokio::select! {
            biased;
            () = shared.stop.notified() => break "the connection was closed by the worker".to_string(),
            ready = read.readable() => {
                if let Err(e) = ready {
                    break format!("{}: reading: {e}", shared.address);
                }
                let socket: &TcpStream = read.as_ref();
                let mut wakers = Vec::new();
                let mut reader = shared.lock_reader();
                let read = socket.try_io(Interest::READABLE, || reader.receive(socket, usize::MAX));
                let handled = shared.handle_read(&mut reader, read, &mut wakers);
                drop(reader);
                Shared::wake(wakers);
                if let Err(why) = handled {
                    break why;
                }
            }
            writable = shared.write.writable(), if must_write => {
                if let Err(e) = writable {
                    break format!("{}: writing: {e}", shared.address);
                }
                let mut state = shared.lock();
                shared.write_out(&mut state);
            }
            () = shared.flush.notified() => {}
        }
    };
    let mut state = shared.lock();
    state.close(&why);
    let wakers = std::mem::take(&mut state.to_wake);
    drop(state);
    Shared::wake(wakers);
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;
    use std::time::Duration;

    struct CountingWaker(AtomicUsize);
    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<CountingWaker>, Waker) {
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        (counter.clone(), Waker::from(counter))
    }

    /// A frame as the server would send it.
    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        frame_header(&mut out, payload.len(), kind, flags, stream);
        out.put_slice(payload);
        out.to_vec()
    }

    /// The frames in `out` as (kind, flags, stream, payload).
    fn frames(mut out: BytesMut) -> Vec<(u8, u8, u32, Bytes)> {
        let mut all = Vec::new();
        if out.starts_with(PREFACE) {
            out.advance(PREFACE.len());
        }
        while !out.is_empty() {
            let len =
                (usize::from(out[0]) << 16) | (usize::from(out[1]) << 8) | usize::from(out[2]);
            let mut f = out.split_to(9 + len).freeze();
            let (kind, flags) = (f[3], f[4]);
            let stream = u32::from_be_bytes([f[5], f[6], f[7], f[8]]);
            f.advance(9);
            all.push((kind, flags, stream, f));
        }
        all
    }

    /// A server's side of the header compression: with indexing, so later blocks refer to
    /// the dynamic table.
    struct Server(loona_hpack::Encoder<'static>);
    impl Server {
        fn new() -> Self {
            Self(loona_hpack::Encoder::new())
        }
        fn headers(&mut self, stream: u32, fields: &[(&str, &str)], end_stream: bool) -> Vec<u8> {
            let block = self
                .0
                .encode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
            let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
            frame(HEADERS, flags, stream, &block)
        }
        /// A whole successful response carrying `message` (already gRPC-framed).
        fn ok(&mut self, stream: u32, message: &[u8]) -> Vec<u8> {
            let mut bytes = self.headers(
                stream,
                &[(":status", "200"), ("content-type", "application/grpc")],
                false,
            );
            bytes.extend(frame(DATA, 0, stream, message));
            bytes.extend(self.headers(stream, &[("grpc-status", "0")], true));
            bytes
        }
    }

    pub(crate) fn grpc_frame(message: &[u8]) -> Bytes {
        let mut out = BytesMut::new();
        out.put_u8(0);
        out.put_u32(message.len() as u32);
        out.put_slice(message);
        out.freeze()
    }

    fn feed(state: &mut State, bytes: &[u8]) -> Result<(), ProtocolViolation> {
        let mut input = BytesMut::from(bytes);
        state.receive(&mut input)?;
        assert!(input.is_empty(), "a partial frame left");
        Ok(())
    }

    /// A connection past the server's (empty) SETTINGS, with nothing left to write.
    fn connected() -> State {
        let mut state = State::new("server:1");
        feed(&mut state, &frame(SETTINGS, 0, 0, &[])).unwrap();
        state.out.clear();
        state
    }

    fn open(state: &mut State, message: &Bytes) -> u32 {
        let (_, w) = waker();
        match state.open(
            "/inference.GRPCInferenceService/ModelInfer",
            message,
            &mut Context::from_waker(&w),
        ) {
            Poll::Ready(Ok(id)) => id,
            other => panic!("open: {other:?}"),
        }
    }

    fn answer(state: &mut State, id: u32) -> Bytes {
        match poll(state, id) {
            Poll::Ready(Ok(message)) => message,
            other => panic!("call {id}: {other:?}"),
        }
    }

    fn poll(state: &mut State, id: u32) -> Poll<Result<Bytes, Status>> {
        let (_, w) = waker();
        state.poll_call(id, &mut Context::from_waker(&w))
    }

    #[test]
    fn a_call_leaves_as_preface_settings_headers_and_data_that_an_hpack_decoder_reads_back() {
        let mut state = State::new("127.0.0.1:8001");
        let message = grpc_frame(b"request");
        // No stream opens before the server's SETTINGS (its limits are unknown until then).
        let (woken, w) = waker();
        let early = state.open("/p", &message, &mut Context::from_waker(&w));
        assert!(early.is_pending());
        let mut settings = Vec::new();
        settings.extend_from_slice(&SETTINGS_MAX_CONCURRENT_STREAMS.to_be_bytes());
        settings.extend_from_slice(&100u32.to_be_bytes());
        feed(&mut state, &frame(SETTINGS, 0, 0, &settings)).unwrap();
        for waker in std::mem::take(&mut state.to_wake) {
            waker.wake();
        }
        assert_eq!(
            woken.0.load(Ordering::SeqCst),
            1,
            "SETTINGS let the waiting call in"
        );
        let id = open(&mut state, &message);
        assert_eq!(id, 1);
        let out = std::mem::take(&mut state.out);
        assert!(out.starts_with(PREFACE));
        let frames = frames(out);
        let kinds: Vec<(u8, u8)> = frames.iter().map(|f| (f.0, f.1)).collect();
        assert_eq!(
            kinds,
            [
                (SETTINGS, 0),
                (WINDOW_UPDATE, 0),
                (SETTINGS, ACK),
                (HEADERS, END_HEADERS),
                (DATA, END_STREAM)
            ]
        );
        let (_, flags, stream, block) = &frames[3];
        assert_eq!((*flags, *stream), (END_HEADERS, 1));
        let fields = loona_hpack::Decoder::new()
            .decode(block)
            .expect("a valid block");
        let fields: Vec<(String, String)> = fields
            .into_iter()
            .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
            .collect();
        let expected = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/inference.GRPCInferenceService/ModelInfer"),
            (":authority", "127.0.0.1:8001"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ];
        assert_eq!(
            fields,
            expected
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .to_vec()
        );
        assert_eq!(frames[4], (DATA, END_STREAM, 1, message));
        // The next call takes the next odd stream id.
        assert_eq!(open(&mut state, &grpc_frame(b"x")), 3);
    }

    #[test]
    fn a_call_s_own_metadata_ends_its_header_block() {
        let mut state = connected();
        let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let (_, w) = waker();
        let opened = state.open_with(
            "/p",
            &[("traceparent", traceparent)],
            &grpc_frame(b"q"),
            &mut Context::from_waker(&w),
        );
        assert!(matches!(opened, Poll::Ready(Ok(1))), "{opened:?}");
        let frames = frames(std::mem::take(&mut state.out));
        let (_, _, _, block) = frames
            .iter()
            .find(|f| f.0 == HEADERS)
            .expect("a HEADERS frame");
        let fields = loona_hpack::Decoder::new()
            .decode(block)
            .expect("a valid block");
        let (name, value) = fields.last().expect("fields");
        assert_eq!(
            (&name[..], &value[..]),
            (&b"traceparent"[..], traceparent.as_bytes())
        );
        assert_eq!(fields.len(), 7, "the six fixed fields and the context");
    }

    #[test]
    fn responses_in_any_split_and_with_the_dynamic_table_give_each_call_its_message() {
        let mut state = connected();
        let mut server = Server::new();
        let a = open(&mut state, &grpc_frame(b"a"));
        let b = open(&mut state, &grpc_frame(b"b"));
        // b answers first; the second response's headers are indexed from the first's.
        let mut bytes = server.ok(b, &grpc_frame(b"answer b"));
        bytes.extend(server.ok(a, &grpc_frame(b"answer a")));
        let mut input = BytesMut::new();
        for byte in bytes {
            input.put_u8(byte);
            state.receive(&mut input).expect("valid frames");
        }
        assert!(input.is_empty());
        assert_eq!(answer(&mut state, a), Bytes::from_static(b"answer a"));
        assert_eq!(answer(&mut state, b), Bytes::from_static(b"answer b"));
    }

    #[test]
    fn answers_read_together_take_the_reads_receive_time_and_all_but_the_last_are_uncertain() {
        let last = Instant::now() + Duration::from_micros(900);
        let stamp_of = |state: &mut State, id: u32| {
            let (_, w) = waker();
            match state.poll_answer(id, &mut Context::from_waker(&w)) {
                Poll::Ready(Ok(answer)) => answer.arrived,
                other => panic!("call {id}: {other:?}"),
            }
        };
        let read = |answers: usize| {
            let mut state = connected();
            let mut server = Server::new();
            let ids: Vec<u32> = (0..answers)
                .map(|_| open(&mut state, &grpc_frame(b"q")))
                .collect();
            let mut input = BytesMut::new();
            for &id in &ids {
                input.extend(server.ok(id, &grpc_frame(b"a")));
            }
            let counts = state.receive_stamped(&mut input, Some(last)).unwrap();
            let stamps: Vec<_> = ids.iter().map(|&id| stamp_of(&mut state, id)).collect();
            (counts, stamps)
        };
        // One answer: the read's time, certain.
        assert_eq!(read(1), ((1, 0), vec![Some(last)]));
        // Three: the read's time for each; only the last is certain of it.
        assert_eq!(read(3), ((3, 2), vec![Some(last); 3]));
    }

    #[test]
    fn calls_are_unanswered_until_an_answer_an_error_a_cancel_or_the_end() {
        let mut state = connected();
        let mut server = Server::new();
        let ids: Vec<u32> = (0..4)
            .map(|_| open(&mut state, &grpc_frame(b"q")))
            .collect();
        assert_eq!(state.unanswered, 4);
        feed(&mut state, &server.ok(ids[0], &grpc_frame(b"a"))).unwrap();
        assert_eq!(state.unanswered, 3);
        // Answered but not yet taken: still answered; taken: gone, no change.
        answer(&mut state, ids[0]);
        assert_eq!(state.unanswered, 3);
        feed(&mut state, &frame(RST_STREAM, 0, ids[1], &[0, 0, 0, 2])).unwrap();
        assert_eq!(state.unanswered, 2);
        state.cancel(ids[2]);
        assert_eq!(state.unanswered, 1);
        // Cancelling an answered call changes nothing.
        state.cancel(ids[1]);
        assert_eq!(state.unanswered, 1);
        state.close("gone");
        assert_eq!(state.unanswered, 0);
    }

    #[test]
    fn reads_are_cut_where_answers_end_so_each_read_is_timed_by_its_own_answer() {
        let mut server = Server::new();
        let update = frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1, 0]);
        let a = server.ok(1, &grpc_frame(b"a"));
        let b = server.ok(3, &grpc_frame(b"b"));
        // WINDOW_UPDATEs before an answer are read with it, and so is one right behind it
        // (Triton writes it in the answer's segment).
        let mut waiting = Vec::new();
        for part in [&update, &update, &a, &update, &b] {
            waiting.extend_from_slice(part);
        }
        let mut ends = Vec::new();
        read_ends(&[], &waiting, &mut ends);
        let after_a = 3 * update.len() + a.len();
        assert_eq!(ends, vec![after_a, waiting.len()]);
        // An answer's first frames are read on their own; a partial frame stays in the socket.
        let c_headers = server.headers(5, &[(":status", "200")], false);
        let mut more = waiting.clone();
        more.extend_from_slice(&update);
        let after_b = more.len();
        more.extend_from_slice(&c_headers);
        more.extend_from_slice(&update);
        let whole = more.len();
        more.extend_from_slice(&frame(DATA, 0, 5, &grpc_frame(b"c"))[..7]);
        read_ends(&[], &more, &mut ends);
        assert_eq!(ends, vec![after_a, after_b, whole]);
        // The rest of a frame begun in an earlier read.
        let (begun, rest) = a.split_at(5);
        read_ends(begun, rest, &mut ends);
        assert_eq!(ends, vec![rest.len()]);
        // An error answer ends its stream too: RST_STREAM, or trailers-only HEADERS whose block
        // ends in a CONTINUATION.
        let reset = frame(RST_STREAM, 0, 7, &[0, 0, 0, 8]);
        let mut trailers_only = frame(HEADERS, END_STREAM, 9, b"");
        trailers_only.extend(frame(CONTINUATION, 0, 9, b""));
        let continued_to = trailers_only.len();
        trailers_only.extend(frame(CONTINUATION, END_HEADERS, 9, b""));
        let mut errors = reset.clone();
        errors.extend_from_slice(&trailers_only);
        read_ends(&[], &errors, &mut ends);
        assert_eq!(ends, vec![reset.len(), errors.len()]);
        assert!(!ends.contains(&(reset.len() + continued_to)));
        // No whole frame: nothing to cut (the reader then takes what there is).
        read_ends(&[], &a[..4], &mut ends);
        assert!(ends.is_empty());
    }

    #[test]
    fn a_message_in_several_padded_data_frames_comes_back_whole() {
        let mut state = connected();
        let mut server = Server::new();
        let id = open(&mut state, &grpc_frame(b"q"));
        let message = grpc_frame(b"a longer answer");
        let mut bytes = server.headers(id, &[(":status", "200")], false);
        let mut padded = vec![3u8];
        padded.extend_from_slice(&message[..6]);
        padded.extend_from_slice(&[0, 0, 0]);
        bytes.extend(frame(DATA, PADDED, id, &padded));
        bytes.extend(frame(DATA, 0, id, &message[6..]));
        bytes.extend(server.headers(id, &[("grpc-status", "0")], true));
        feed(&mut state, &bytes).unwrap();
        assert_eq!(
            answer(&mut state, id),
            Bytes::from_static(b"a longer answer")
        );
    }

    #[test]
    fn error_statuses_trailers_only_and_http_errors_fail_the_call_with_their_reason() {
        let mut state = connected();
        let mut server = Server::new();
        let trailers_only = open(&mut state, &grpc_frame(b"q"));
        let in_trailers = open(&mut state, &grpc_frame(b"q"));
        let http_error = open(&mut state, &grpc_frame(b"q"));
        let no_status = open(&mut state, &grpc_frame(b"q"));
        let mut bytes = server.headers(
            trailers_only,
            &[
                (":status", "200"),
                ("grpc-status", "5"),
                ("grpc-message", "Request for unknown model: %27x%27"),
            ],
            true,
        );
        bytes.extend(server.headers(in_trailers, &[(":status", "200")], false));
        bytes.extend(server.headers(
            in_trailers,
            &[("grpc-status", "3"), ("grpc-message", "bad input")],
            true,
        ));
        bytes.extend(server.headers(http_error, &[(":status", "503")], true));
        bytes.extend(server.headers(no_status, &[(":status", "200")], false));
        bytes.extend(frame(DATA, END_STREAM, no_status, &grpc_frame(b"r")));
        feed(&mut state, &bytes).unwrap();
        let Poll::Ready(Err(status)) = poll(&mut state, trailers_only) else {
            panic!("trailers-only is an error")
        };
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert_eq!(status.message(), "Request for unknown model: 'x'");
        let Poll::Ready(Err(status)) = poll(&mut state, in_trailers) else {
            panic!("status 3 is an error")
        };
        assert_eq!(
            (status.code(), status.message()),
            (tonic::Code::InvalidArgument, "bad input")
        );
        let Poll::Ready(Err(status)) = poll(&mut state, http_error) else {
            panic!("HTTP 503 is an error")
        };
        assert_eq!(
            status.message(),
            "HTTP status 503 instead of a gRPC response"
        );
        let Poll::Ready(Err(status)) = poll(&mut state, no_status) else {
            panic!("a response without grpc-status is an error")
        };
        assert_eq!(status.message(), "response without grpc-status");
    }

    #[test]
    fn request_bodies_wait_for_flow_control_credit_and_respect_the_frame_size() {
        let mut state = connected();
        // The server allows 20 bytes per stream and 16384-byte frames.
        let mut settings = Vec::new();
        settings.extend_from_slice(&SETTINGS_INITIAL_WINDOW_SIZE.to_be_bytes());
        settings.extend_from_slice(&20u32.to_be_bytes());
        feed(&mut state, &frame(SETTINGS, 0, 0, &settings)).unwrap();
        state.out.clear();
        let message = Bytes::from(vec![7u8; 50]);
        let id = open(&mut state, &message);
        let sent = frames(std::mem::take(&mut state.out));
        assert_eq!(sent.len(), 2);
        assert_eq!((sent[1].0, sent[1].1, sent[1].3.len()), (DATA, 0, 20));
        // Stream credit alone is not enough while the connection's window allows more: it does
        // (65535), so 25 more bytes go, and the last 5 wait.
        feed(
            &mut state,
            &frame(WINDOW_UPDATE, 0, id, &25u32.to_be_bytes()),
        )
        .unwrap();
        let sent = frames(std::mem::take(&mut state.out));
        assert_eq!((sent[0].0, sent[0].1, sent[0].3.len()), (DATA, 0, 25));
        // A raised initial window gives every open stream the difference, used only after our
        // ACK (the peer counts from the settings we have acknowledged).
        let mut settings = Vec::new();
        settings.extend_from_slice(&SETTINGS_INITIAL_WINDOW_SIZE.to_be_bytes());
        settings.extend_from_slice(&65_535u32.to_be_bytes());
        feed(&mut state, &frame(SETTINGS, 0, 0, &settings)).unwrap();
        let sent = frames(std::mem::take(&mut state.out));
        assert_eq!((sent[0].0, sent[0].1), (SETTINGS, ACK));
        assert_eq!(
            (sent[1].0, sent[1].1, sent[1].3.len()),
            (DATA, END_STREAM, 5)
        );
        // A body over the frame size leaves in frames of at most that size.
        let big = Bytes::from(vec![1u8; 40_000]);
        open(&mut state, &big);
        let sizes: Vec<usize> = frames(std::mem::take(&mut state.out))
            .iter()
            .filter(|f| f.0 == DATA)
            .map(|f| f.3.len())
            .collect();
        assert_eq!(sizes, [16_384, 16_384, 7_232]);
        // The connection window bounds every stream: 65535 − 50 − 40000 are left for the next.
        let id = open(&mut state, &Bytes::from(vec![2u8; 30_000]));
        let sent: usize = frames(std::mem::take(&mut state.out))
            .iter()
            .filter(|f| f.0 == DATA)
            .map(|f| f.3.len())
            .sum();
        assert_eq!(sent, 65_535 - 50 - 40_000);
        feed(
            &mut state,
            &frame(WINDOW_UPDATE, 0, 0, &100_000u32.to_be_bytes()),
        )
        .unwrap();
        let rest = frames(std::mem::take(&mut state.out));
        assert_eq!((rest.len(), rest[0].1, rest[0].2), (1, END_STREAM, id));
        assert_eq!(sent + rest[0].3.len(), 30_000);
    }

    #[test]
    fn pings_settings_and_resets_are_answered_and_goaway_fails_only_unserved_calls() {
        let mut state = connected();
        let mut server = Server::new();
        let served = open(&mut state, &grpc_frame(b"q"));
        let unserved = open(&mut state, &grpc_frame(b"q"));
        let reset = open(&mut state, &grpc_frame(b"q"));
        state.out.clear();
        let mut bytes = frame(PING, 0, 0, b"12345678");
        bytes.extend(frame(RST_STREAM, 0, reset, &0x2u32.to_be_bytes()));
        let mut goaway = served.to_be_bytes().to_vec();
        goaway.extend_from_slice(&0u32.to_be_bytes());
        goaway.extend_from_slice(b"shutting down");
        bytes.extend(frame(GOAWAY, 0, 0, &goaway));
        feed(&mut state, &bytes).unwrap();
        let sent = frames(std::mem::take(&mut state.out));
        assert_eq!(sent, [(PING, ACK, 0, Bytes::from_static(b"12345678"))]);
        let Poll::Ready(Err(status)) = poll(&mut state, reset) else {
            panic!("a reset stream fails")
        };
        assert_eq!(
            status.message(),
            "the server reset the stream (INTERNAL_ERROR)"
        );
        let Poll::Ready(Err(status)) = poll(&mut state, unserved) else {
            panic!("a stream above GOAWAY's last id fails")
        };
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(
            status
                .message()
                .contains("GOAWAY (NO_ERROR: shutting down)"),
            "{status:?}"
        );
        // The served call still gets its answer; no new call opens.
        assert!(poll(&mut state, served).is_pending());
        feed(&mut state, &server.ok(served, &grpc_frame(b"r"))).unwrap();
        assert_eq!(answer(&mut state, served), Bytes::from_static(b"r"));
        let (_, w) = waker();
        let refused = state.open("/p", &grpc_frame(b"q"), &mut Context::from_waker(&w));
        assert!(matches!(refused, Poll::Ready(Err(why)) if why.to_string().contains("GOAWAY")));
    }

    #[test]
    fn the_peers_stream_limit_holds_calls_back_until_one_ends_and_a_given_up_call_is_reset() {
        let mut state = connected();
        let mut server = Server::new();
        let mut settings = Vec::new();
        settings.extend_from_slice(&SETTINGS_MAX_CONCURRENT_STREAMS.to_be_bytes());
        settings.extend_from_slice(&1u32.to_be_bytes());
        feed(&mut state, &frame(SETTINGS, 0, 0, &settings)).unwrap();
        let first = open(&mut state, &grpc_frame(b"q"));
        let (woken, w) = waker();
        let waiting = state.open("/p", &grpc_frame(b"q"), &mut Context::from_waker(&w));
        assert!(waiting.is_pending());
        feed(&mut state, &server.ok(first, &grpc_frame(b"r"))).unwrap();
        assert!(poll(&mut state, first).is_ready());
        for waker in std::mem::take(&mut state.to_wake) {
            waker.wake();
        }
        assert_eq!(
            woken.0.load(Ordering::SeqCst),
            1,
            "the waiting call is woken"
        );
        let second = open(&mut state, &grpc_frame(b"q"));
        state.out.clear();
        state.cancel(second);
        let sent = frames(std::mem::take(&mut state.out));
        assert_eq!(
            sent,
            [(RST_STREAM, 0, second, Bytes::from_static(&[0, 0, 0, 8]))]
        );
        // Its late response is still decoded (HPACK state) and dropped.
        feed(&mut state, &server.ok(second, &grpc_frame(b"late"))).unwrap();
    }

    #[test]
    fn broken_peers_are_connection_errors_that_fail_every_call() {
        for (bytes, why) in [
            (
                frame(CONTINUATION, END_HEADERS, 1, b""),
                "CONTINUATION without HEADERS",
            ),
            (frame(PUSH_PROMISE, 0, 1, &[0, 0, 0, 2]), "PUSH_PROMISE"),
            (frame(PING, 0, 0, b"short"), "PING of a wrong size"),
            (
                frame(HEADERS, END_HEADERS, 1, &[0xff, 0xff, 0xff, 0xff]),
                "HPACK",
            ),
            (
                frame(DATA, PADDED, 1, &[9, 1]),
                "padding longer than the frame",
            ),
        ] {
            let mut state = connected();
            let id = open(&mut state, &grpc_frame(b"q"));
            let mut input = BytesMut::from(&bytes[..]);
            let e = state.receive(&mut input).expect_err(why).to_string();
            assert!(e.contains(why), "{e} should say {why}");
            state.close(&e);
            assert!(matches!(poll(&mut state, id), Poll::Ready(Err(s)) if s.message() == e));
        }
        // A frame over our limit is refused from its header alone.
        let mut state = connected();
        let mut input = BytesMut::from(&[0x20, 0, 0, DATA, 0, 0, 0, 0, 1][..]);
        assert!(
            state
                .receive(&mut input)
                .unwrap_err()
                .to_string()
                .contains("a frame of 2097152 bytes")
        );
    }

    /// Answers a call with `message` (a framed gRPC message) and grpc-status 0.
    fn echo(mut respond: h2::server::SendResponse<Bytes>, message: Bytes) {
        let response = http::Response::builder()
            .header("content-type", "application/grpc")
            .body(())
            .unwrap();
        let Ok(mut send) = respond.send_response(response, false) else {
            return;
        };
        let _ = send.send_data(message, false);
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        let _ = send.send_trailers(trailers);
    }

    /// A peer on the h2 crate's server (an independent HTTP/2 implementation) that answers each
    /// call with its own request message; `max_streams` is its concurrency limit. Returns its
    /// address and a handle whose drop ends the server.
    async fn echo_server(
        max_streams: u32,
        mut on_connection: impl FnMut(u32) -> bool + Send + 'static,
    ) -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            let mut served = 0;
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                served += 1;
                serve_echo(socket, max_streams, on_connection(served)).await;
            }
        });
        (address, server)
    }

    /// The echo server's side of one accepted connection: the HTTP/2 handshake (its SETTINGS),
    /// then each call answered on a task of its own; `keep` false says GOAWAY at once.
    async fn serve_echo(socket: TcpStream, max_streams: u32, keep: bool) {
        let mut connection = h2::server::Builder::new()
            .max_concurrent_streams(max_streams)
            .handshake::<_, Bytes>(socket)
            .await
            .unwrap();
        if !keep {
            // Graceful shutdown: GOAWAY, then the calls already taken are served.
            connection.graceful_shutdown();
        }
        tokio::spawn(async move {
            while let Some(Ok((request, respond))) = connection.accept().await {
                tokio::spawn(async move {
                    let mut body = request.into_body();
                    let mut message = BytesMut::new();
                    while let Some(Ok(chunk)) = body.data().await {
                        let _ = body.flow_control().release_capacity(chunk.len());
                        message.put_slice(&chunk);
                    }
                    echo(respond, message.freeze());
                });
            }
        });
    }

    /// An echo server on a runtime of its own thread, so that it answers while the client's
    /// threads are busy; it serves as long as the returned runtime lives.
    fn echo_server_on_its_own_thread() -> (String, tokio::runtime::Runtime) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (address, _server) = runtime.block_on(echo_server(8, |_| true));
        (address, runtime)
    }

    #[test]
    fn an_answer_is_timed_when_it_reached_the_host_not_when_a_busy_client_read_it() {
        let (address, _server) = echo_server_on_its_own_thread();
        let client_runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        client_runtime.block_on(async {
            let tcp = TcpStream::connect(&address).await.unwrap();
            let connection = UnaryConnection::start(tcp, &address);
            // The handshake, so the next call leaves at once.
            let first = connection.call("/echo", grpc_frame(b"first")).await;
            assert_eq!(&first.unwrap().unwrap().message[..], b"first");
            let sent = Instant::now();
            let call = connection
                .try_start("/echo", &grpc_frame(b"timed"))
                .expect("a free stream");
            std::thread::sleep(Duration::from_millis(300));
            let answer = call.await.unwrap();
            let read = sent.elapsed();
            assert_eq!(&answer.message[..], b"timed");
            let arrived = answer.arrived.expect("the kernel's receive time");
            assert!(read >= Duration::from_millis(300), "{read:?}");
            assert!(
                arrived.duration_since(sent) < Duration::from_millis(150),
                "the answer was read {read:?} after the send and timed at {:?}: the client's \
                 own wait counted as the server's",
                arrived.duration_since(sent)
            );
        });
    }

    /// A connection to `address` on `runtime`, past the handshake (one call, whose answer must
    /// be `first_answer`), with reads deferred.
    fn deferred_connection(
        runtime: &tokio::runtime::Runtime,
        address: &str,
        first_answer: &[u8],
    ) -> UnaryConnection {
        let connection = runtime.block_on(async {
            let tcp = TcpStream::connect(address).await.unwrap();
            let connection = UnaryConnection::start(tcp, address);
            let first = connection.call("/first", grpc_frame(b"first")).await;
            assert_eq!(&first.unwrap().unwrap().message[..], first_answer);
            // Frames the server sends after the answer (its window updates) are read before
            // the reads are deferred: a read under way then would take the next answer too
            // (seen once on a loaded machine).
            tokio::time::sleep(Duration::from_millis(100)).await;
            connection
        });
        assert!(connection.defer_reads(true), "SO_RCVLOWAT refused");
        connection
    }

    #[test]
    fn deferred_answers_wait_in_the_socket_for_the_reader_and_keep_their_receive_time() {
        let (address, _server) = echo_server_on_its_own_thread();
        // The client's runtime has a thread free to read at once, were it woken.
        let client_runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let connection = deferred_connection(&client_runtime, &address, b"first");
        let _entered = client_runtime.enter();
        let (woken, waker) = waker();
        let sent = Instant::now();
        let mut call = connection
            .try_start("/echo", &grpc_frame(b"held"))
            .expect("a free stream");
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut call).poll(&mut cx).is_pending());
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            woken.0.load(Ordering::SeqCst),
            0,
            "the answer woke the connection task although reads were deferred"
        );
        let mut wakers = Vec::new();
        assert_eq!(connection.read_now(&mut wakers).uncertain, 0);
        assert_eq!(wakers.len(), 1, "the reader gets the call's waker");
        for w in wakers {
            w.wake();
        }
        let Poll::Ready(Ok(answer)) = Pin::new(&mut call).poll(&mut cx) else {
            panic!("the call has its answer after read_now");
        };
        assert_eq!(&answer.message[..], b"held");
        let arrived = answer.arrived.expect("a receive time").duration_since(sent);
        assert!(arrived < Duration::from_millis(100), "{arrived:?}");
        // Undeferred: the next answer comes to the call by itself.
        assert!(connection.defer_reads(false));
        let next = connection
            .try_start("/echo", &grpc_frame(b"prompt"))
            .expect("a free stream");
        let answer = client_runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(10), next)
                .await
                .expect("an undeferred answer wakes its call")
                .unwrap()
        });
        assert_eq!(&answer.message[..], b"prompt");
    }

    /// When a scripted server sends the WINDOW_UPDATE for a request's bytes.
    #[derive(Debug, Clone, Copy)]
    pub(crate) enum WindowUpdate {
        /// As soon as it reads the request.
        AtOnce,
        /// In the same write as the answer, behind it (as Triton 2.51's gRPC server does).
        WithTheAnswer,
    }

    /// A scripted HTTP/2 peer on threads of its own: it answers each request with `answer`
    /// (gRPC-framed) `delay` after reading it, and gives the request's bytes back to the
    /// connection window as `update` says, on every connection made to it. Returns its
    /// address.
    pub(crate) fn slow_server_acknowledging_each_request(
        delay: Duration,
        answer: Bytes,
        update: WindowUpdate,
    ) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            while let Ok((socket, _)) = listener.accept() {
                let answer = answer.clone();
                std::thread::spawn(move || {
                    serve_slowly(socket, delay, answer, update);
                });
            }
        });
        address
    }

    /// One connection of [`slow_server_acknowledging_each_request`].
    fn serve_slowly(
        mut socket: std::net::TcpStream,
        delay: Duration,
        answer: Bytes,
        update: WindowUpdate,
    ) {
        socket.set_nodelay(true).unwrap();
        let mut writer = socket.try_clone().unwrap();
        let (due, answers) = std::sync::mpsc::channel::<(Instant, u32, Vec<u8>)>();
        let mut answering = socket.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut server = Server::new();
            for (at, stream, after) in answers {
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                // One write, as gRPC servers send a unary answer.
                let mut bytes = server.ok(stream, &answer);
                bytes.extend(after);
                if answering.write_all(&bytes).is_err() {
                    return;
                }
            }
        });
        let mut handshake = frame(SETTINGS, 0, 0, &[]);
        handshake.extend(frame(SETTINGS, ACK, 0, &[]));
        writer.write_all(&handshake).unwrap();
        let mut input = Vec::new();
        let mut buffer = [0u8; 4096];
        let mut preface_seen = false;
        loop {
            let Ok(n) = socket.read(&mut buffer) else {
                return;
            };
            if n == 0 {
                return;
            }
            input.extend_from_slice(&buffer[..n]);
            if !preface_seen {
                if input.len() < PREFACE.len() {
                    continue;
                }
                input.drain(..PREFACE.len());
                preface_seen = true;
            }
            while input.len() >= 9 {
                let len = (usize::from(input[0]) << 16)
                    | (usize::from(input[1]) << 8)
                    | usize::from(input[2]);
                if input.len() < 9 + len {
                    break;
                }
                let frame_bytes: Vec<u8> = input.drain(..9 + len).collect();
                let stream = u32::from_be_bytes([
                    frame_bytes[5],
                    frame_bytes[6],
                    frame_bytes[7],
                    frame_bytes[8],
                ]);
                if frame_bytes[3] == DATA && frame_bytes[4] & END_STREAM != 0 {
                    let window = frame(WINDOW_UPDATE, 0, 0, &(len as u32).to_be_bytes());
                    let after = match update {
                        WindowUpdate::AtOnce => {
                            if writer.write_all(&window).is_err() {
                                return;
                            }
                            Vec::new()
                        }
                        WindowUpdate::WithTheAnswer => window,
                    };
                    let _ = due.send((Instant::now() + delay, stream, after));
                }
            }
        }
    }

    /// Deferred calls to a server that acknowledges each request at once and answers it
    /// `delay` later: one call at each of `sends` (offsets), one `read_now` at `read_at`.
    /// Returns, per call, its latency to the receive time the read gave it, and how many
    /// answers the read said were uncertain.
    fn deferred_calls(
        update: WindowUpdate,
        sends: &[Duration],
        read_at: Duration,
        delay: Duration,
    ) -> (Vec<Duration>, u64) {
        let address = slow_server_acknowledging_each_request(delay, grpc_frame(b"late"), update);
        let client_runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let connection = deferred_connection(&client_runtime, &address, b"late");
        let _entered = client_runtime.enter();
        let (_, waker) = waker();
        let mut cx = Context::from_waker(&waker);
        let start = Instant::now();
        let mut calls = Vec::new();
        for &at in sends {
            std::thread::sleep((start + at).saturating_duration_since(Instant::now()));
            let sent = Instant::now();
            let mut call = connection
                .try_start("/slow", &grpc_frame(b"q"))
                .expect("a free stream");
            assert!(Pin::new(&mut call).poll(&mut cx).is_pending());
            calls.push((sent, call));
        }
        std::thread::sleep((start + read_at).saturating_duration_since(Instant::now()));
        let mut wakers = Vec::new();
        let uncertain = connection.read_now(&mut wakers);
        let latencies = calls
            .into_iter()
            .enumerate()
            .filter_map(
                |(i, (sent, mut call))| match Pin::new(&mut call).poll(&mut cx) {
                    Poll::Ready(Ok(answer)) => {
                        Some(answer.arrived.expect("a receive time").duration_since(sent))
                    }
                    Poll::Pending => None,
                    Poll::Ready(Err(e)) => panic!("call {i}: {e}"),
                },
            )
            .collect();
        (latencies, uncertain.uncertain)
    }

    #[test]
    fn an_answer_that_waited_in_the_socket_keeps_its_receive_time_or_is_said_to_be_uncertain() {
        let ms = Duration::from_millis;
        let delay = ms(60);
        // Exact: within the delay and the server thread's own lateness.
        let exact = |latency: Duration| latency >= delay && latency < delay + ms(25);
        for update in [WindowUpdate::AtOnce, WindowUpdate::WithTheAnswer] {
            // One answer, a WINDOW_UPDATE before it or behind it in the same segment: the
            // read's time is the answer's, and certain.
            let (latencies, uncertain) = deferred_calls(update, &[ms(0)], ms(150), delay);
            assert_eq!(latencies.len(), 1);
            assert!(exact(latencies[0]), "{update:?}: {latencies:?}");
            assert_eq!(
                uncertain, 0,
                "{update:?}: a certain time said to be uncertain"
            );
            // Two answers waiting together (the kernel merges their segments and keeps the
            // later time): each is timed exactly or said to be uncertain, never silently late.
            let (latencies, uncertain) = deferred_calls(update, &[ms(0), ms(50)], ms(250), delay);
            assert_eq!(latencies.len(), 2);
            let exactly_timed = latencies.iter().filter(|&&l| exact(l)).count() as u64;
            assert!(exact(latencies[1]), "{update:?}: {latencies:?}");
            assert_eq!(
                exactly_timed + uncertain,
                2,
                "{update:?}: latencies {latencies:?} against {delay:?}, {uncertain} said to \
                 be uncertain"
            );
        }
    }

    #[tokio::test]
    async fn against_an_independent_http2_server_calls_beyond_its_stream_limit_and_windows_all_come_back()
     {
        let (address, _server) = echo_server(2, |_| true).await;
        let tcp = TcpStream::connect(&address).await.unwrap();
        let connection = UnaryConnection::start(tcp, &address);
        // 40 calls at once on a server taking 2 streams at a time, each body 3x the default
        // 65535-byte windows: they wait for streams and for WINDOW_UPDATEs.
        let calls = (0..40u8).map(|i| {
            let connection = connection.clone();
            async move {
                let message = grpc_frame(&vec![i; 200_000]);
                let answer = connection
                    .call("/echo", message)
                    .await
                    .expect("the connection is up");
                (i, answer)
            }
        });
        for (i, answer) in futures::future::join_all(calls).await {
            let answer = answer.unwrap_or_else(|e| panic!("call {i}: {e:?}")).message;
            assert_eq!(answer.len(), 200_000);
            assert!(
                answer.iter().all(|b| *b == i),
                "call {i} got another call's answer"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_started_from_a_plain_thread_leave_at_once_or_not_at_all_and_come_back_whole() {
        // The server's side is accepted here and answers only once told to, so that "before
        // its SETTINGS" is a fact, not a race with its handshake.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let tcp = TcpStream::connect(&address).await.unwrap();
        let (socket, _) = listener.accept().await.unwrap();
        let connection = UnaryConnection::start(tcp, &address);
        // Before the server's SETTINGS nothing may leave at once.
        assert!(
            connection
                .try_start("/echo", &grpc_frame(b"early"))
                .is_none()
        );
        let _server = tokio::spawn(serve_echo(socket, 2, true));
        let first = connection.call("/echo", grpc_frame(b"first")).await;
        assert_eq!(&first.unwrap().unwrap().message[..], b"first");
        // From a thread outside the runtime (the open loop's pacer): two streams are allowed,
        // the third call cannot leave at once; bodies beyond the 65535-byte window follow as
        // the server's WINDOW_UPDATEs come.
        let on_thread = connection.clone();
        let (started, refused) = std::thread::spawn(move || {
            let started: Vec<_> = (1..=2u8)
                .map(|i| {
                    let call = on_thread.try_start("/echo", &grpc_frame(&vec![i; 200_000]));
                    (i, call.expect("a free stream"))
                })
                .collect();
            let refused = on_thread.try_start("/echo", &grpc_frame(b"third"));
            (started, refused.is_none())
        })
        .join()
        .unwrap();
        assert!(
            refused,
            "a third stream left beyond the server's limit of 2"
        );
        for (i, call) in started {
            let answer = tokio::time::timeout(std::time::Duration::from_secs(10), call)
                .await
                .unwrap_or_else(|_| panic!("call {i} never came back"))
                .unwrap()
                .message;
            assert!(answer.len() == 200_000 && answer.iter().all(|b| *b == i));
        }
    }

    #[tokio::test]
    async fn a_server_going_away_or_gone_ends_the_connection_and_says_why() {
        // The server says GOAWAY at once: the connection takes no call.
        let (address, _server) = echo_server(100, |_| false).await;
        let tcp = TcpStream::connect(&address).await.unwrap();
        let connection = UnaryConnection::start(tcp, &address);
        let refused = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            loop {
                match connection.call("/echo", grpc_frame(b"q")).await {
                    Err(why) => break why.to_string(),
                    // The call raced the GOAWAY and was served: try again.
                    Ok(Ok(_)) => tokio::task::yield_now().await,
                    Ok(Err(status)) => break status.message().to_string(),
                }
            }
        })
        .await
        .expect("GOAWAY is seen");
        assert!(
            refused.contains("GOAWAY") || refused.contains("closed"),
            "{refused}"
        );
        assert!(connection.is_closed());

        // A listener that accepts and closes: the call fails as unavailable, naming the server.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            drop(socket);
        });
        let tcp = TcpStream::connect(&address).await.unwrap();
        let connection = UnaryConnection::start(tcp, &address);
        let outcome = connection.call("/echo", grpc_frame(b"q")).await;
        let why = match outcome {
            Err(why) => why.to_string(),
            Ok(Err(status)) => {
                assert_eq!(status.code(), tonic::Code::Unavailable);
                status.message().to_string()
            }
            Ok(Ok(_)) => panic!("a closed socket answered"),
        };
        assert!(why.starts_with(&address), "{why}");
    }

    /// chttp2 (Triton's gRPC server) resizes its streams' initial window as it estimates the
    /// bandwidth-delay product, and counts a stream's window from the initial window we have
    /// acknowledged: DATA sent on the raised window before our SETTINGS ACK overflows it and the
    /// stream is reset (PROTOCOL_ERROR from chttp2). The h2 crate's server is as strict
    /// (FLOW_CONTROL_ERROR), so it stands in: it raises its initial window while a large body
    /// waits for stream credit, and the call must still come back whole.
    #[tokio::test]
    async fn a_raised_initial_window_is_used_only_after_our_settings_ack() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let _server = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let mut connection = h2::server::Builder::new()
                .initial_connection_window_size(8 << 20)
                .handshake::<_, Bytes>(socket)
                .await
                .unwrap();
            let (window_used, mut raise) = tokio::sync::mpsc::channel::<()>(1);
            loop {
                tokio::select! {
                    accepted = connection.accept() => {
                        let Some(Ok((request, mut respond))) = accepted else { return };
                        let window_used = window_used.clone();
                        tokio::spawn(async move {
                            let mut body = request.into_body();
                            let mut message = BytesMut::new();
                            // The first 65535 bytes are held (no credit given back) until the
                            // raised window is announced.
                            while message.len() < 65_535 {
                                let Some(Ok(chunk)) = body.data().await else { return };
                                message.put_slice(&chunk);
                            }
                            window_used.send(()).await.unwrap();
                            let held = message.len();
                            let _ = body.flow_control().release_capacity(held);
                            while let Some(chunk) = body.data().await {
                                let chunk = match chunk {
                                    Ok(chunk) => chunk,
                                    Err(e) => {
                                        respond.send_reset(h2::Reason::INTERNAL_ERROR);
                                        panic!("the request body broke: {e}");
                                    }
                                };
                                let _ = body.flow_control().release_capacity(chunk.len());
                                message.put_slice(&chunk);
                            }
                            echo(respond, message.freeze());
                        });
                    }
                    Some(()) = raise.recv() => connection.set_initial_window_size(1 << 20).unwrap(),
                }
            }
        });
        let tcp = TcpStream::connect(&address).await.unwrap();
        let connection = UnaryConnection::start(tcp, &address);
        let message = grpc_frame(&vec![7; 600_000]);
        let answer = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            connection.call("/echo", message),
        )
        .await
        .expect("the call comes back")
        .expect("the connection is up")
        .unwrap_or_else(|status| panic!("{status:?}"))
        .message;
        assert!(answer.len() == 600_000 && answer.iter().all(|b| *b == 7));
    }
}
