//! The worker's HTTP/2 connections to a server: tonic's generated client runs over one on the h2
//! crate (it is a tower `Service`); pre-encoded unary calls (the Load and Infer scenarios'
//! requests) go on a second, lean one of our own (`unary`, [`super::unary_h2`]).
//!
//! Why not tonic's `Channel`: through hyper, a request's HEADERS and its DATA leave in two
//! separate writes (the body is piped by a second task once flow-control capacity is granted),
//! and every call hops through a buffer task. On loopback each write costs the sender the whole
//! TCP receive path as well, so a closed-loop client spent about half of its CPU per request
//! there. Here a request's frames are queued together and the connection task flushes them (and
//! those of every other stream ready at that moment) in one write.
//!
//! A dead connection (server killed, GOAWAY) is replaced on the next call, like a `Channel`
//! reconnects: the first call after a server died reports why it cannot connect.

use bytes::Bytes;
use h2::client::SendRequest;
use http::uri::{Authority, PathAndQuery, Scheme};
use http_body::Frame;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tonic::Status;

use super::unary_h2::{Answer, StartedCall, UnaryConnection};

/// Our receive windows: a response (an image batch's outputs, a model config) never waits for
/// a WINDOW_UPDATE round trip.
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Dead-peer detection: about 60 s on an idle connection, 60 s with data unacknowledged.
const KEEPALIVE: socket2::TcpKeepalive = socket2::TcpKeepalive::new()
    .with_time(Duration::from_secs(30))
    .with_interval(Duration::from_secs(10))
    .with_retries(3);
const USER_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone)]
pub struct H2Connection {
    inner: Arc<Inner>,
}

struct Inner {
    address: String,
    authority: Authority,
    /// The live connection; `None` before the first connect and after it was found dead.
    current: Mutex<Option<Live>>,
    /// The lean connections for unary calls: the first for every call, more for the open
    /// loop's direct sends ([`H2Connection::try_start_unary`]); none before the first call.
    unary: Mutex<UnaryPool>,
    /// The runtime that drives the connections (a direct send may come from another thread).
    runtime: tokio::runtime::Handle,
    /// Answer readers that have deferred reads ([`DeferredReads`]): while there is one,
    /// direct sends spread over the lean connections; else they all go on the first.
    spreading: AtomicUsize,
    /// Held while connecting, so concurrent calls on a dead connection make one new one.
    connecting: tokio::sync::Mutex<()>,
}

/// Lean connections to the server for unary calls.
#[derive(Default)]
struct UnaryPool {
    connections: Vec<UnaryConnection>,
    /// One more connection is being made for direct sends.
    growing: bool,
}

impl UnaryPool {
    fn live(&mut self) -> &[UnaryConnection] {
        self.connections.retain(|c| !c.is_closed());
        &self.connections
    }
}

/// Lean connections a direct send may spread its calls over: each socket then holds at most
/// one unanswered call while calls come faster than their answers (up to this many at once).
pub const MAX_UNARY_CONNECTIONS: usize = 8;

#[derive(Clone)]
struct Live {
    sender: SendRequest<Bytes>,
    /// Set when the connection task ends (EOF, reset, GOAWAY handled).
    closed: Arc<AtomicBool>,
}

impl H2Connection {
    /// Connects now, so a wrong address or a server that is not up is reported at once.
    pub async fn connect(address: &str) -> Result<Self, Status> {
        let authority: Authority = address
            .parse()
            .map_err(|e| Status::invalid_argument(format!("{address}: {e}")))?;
        let connection = Self {
            inner: Arc::new(Inner {
                address: address.into(),
                authority,
                current: Mutex::new(None),
                unary: Mutex::new(UnaryPool::default()),
                runtime: tokio::runtime::Handle::current(),
                spreading: AtomicUsize::new(0),
                connecting: tokio::sync::Mutex::new(()),
            }),
        };
        connection.sender().await?;
        Ok(connection)
    }

    pub fn address(&self) -> &str {
        &self.inner.address
    }

    /// The URI of a gRPC method on this server.
    pub fn uri(&self, path: &'static str) -> http::Uri {
        http::Uri::builder()
            .scheme(Scheme::HTTP)
            .authority(self.inner.authority.clone())
            .path_and_query(PathAndQuery::from_static(path))
            .build()
            .expect("a static path and a parsed authority make a URI")
    }

    fn live(&self) -> Option<Live> {
        let current = self.inner.current.lock().unwrap_or_else(|e| e.into_inner());
        current
            .as_ref()
            .filter(|l| !l.closed.load(Ordering::Acquire))
            .cloned()
    }

    /// Marks a connection (known by its `closed` flag) dead, so the next call makes a new one.
    fn forget(&self, closed: &Arc<AtomicBool>) {
        closed.store(true, Ordering::Release);
        let mut current = self.inner.current.lock().unwrap_or_else(|e| e.into_inner());
        if current
            .as_ref()
            .is_some_and(|l| Arc::ptr_eq(&l.closed, closed))
        {
            *current = None;
        }
    }

    async fn sender(&self) -> Result<Live, Status> {
        if let Some(live) = self.live() {
            return Ok(live);
        }
        let _connecting = self.inner.connecting.lock().await;
        if let Some(live) = self.live() {
            return Ok(live);
        }
        let address = &self.inner.address;
        let tcp = tcp_connect(address).await?;
        let (sender, connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .handshake::<_, Bytes>(tcp)
            .await
            .map_err(|e| Status::unavailable(format!("{address}: HTTP/2 handshake: {e}")))?;
        let closed = Arc::new(AtomicBool::new(false));
        let flag = closed.clone();
        let label = address.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(server = %label, "HTTP/2 connection ended: {e}");
            }
            flag.store(true, Ordering::Release);
        });
        let live = Live { sender, closed };
        *self.inner.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(live.clone());
        Ok(live)
    }

    /// Opens a stream for `request` once the connection has room for one more; a connection
    /// that turns out dead here is replaced once (nothing was sent on it).
    async fn open(
        &self,
        request: http::Request<()>,
        end_of_stream: bool,
    ) -> Result<(h2::client::ResponseFuture, h2::SendStream<Bytes>), Status> {
        let mut retried = false;
        loop {
            let Live { sender, closed } = self.sender().await?;
            match sender.ready().await {
                Ok(mut sender) => {
                    return sender
                        .send_request(request, end_of_stream)
                        .map_err(|e| self.stream_error(e));
                }
                Err(e) if retried => {
                    return Err(Status::unavailable(format!("{}: {e}", self.inner.address)));
                }
                Err(_) => {
                    self.forget(&closed);
                    retried = true;
                }
            }
        }
    }

    /// One unary gRPC call to the method at `path` with an already framed request message
    /// (`frame`); returns the response message's bytes and their receive time. It goes on the
    /// lean connection ([`UnaryConnection`]), a second connection to the server beside
    /// tonic's; one found closed before the call was sent is replaced once.
    pub async fn unary(&self, path: &str, frame: Bytes) -> Result<Answer, Status> {
        self.unary_with(path, &[], frame).await
    }

    /// [`Self::unary`] with custom metadata (`(name, value)`, names in lowercase).
    pub async fn unary_with(
        &self,
        path: &str,
        metadata: &[(&str, &str)],
        frame: Bytes,
    ) -> Result<Answer, Status> {
        let mut retried = false;
        loop {
            let connection = self.unary_connection().await?;
            match connection.call_with(path, metadata, frame.clone()).await {
                Ok(outcome) => return outcome,
                Err(why) if retried => return Err(Status::unavailable(why.to_string())),
                Err(_) => retried = true,
            }
        }
    }

    /// A unary call sent now, from any thread, without waiting (see
    /// [`UnaryConnection::try_start`]), on a lean connection with no call unanswered where
    /// there is one: answers that wait in one socket for an open loop's pacer to read them
    /// are then never two, so the kernel cannot merge them and each keeps its receive time
    /// (`scenarios/pacer.rs`). Where every connection has a call unanswered, one more is made
    /// for the next send (up to [`MAX_UNARY_CONNECTIONS`]) and this one goes on the first.
    /// Only while a reader has deferred reads: otherwise every call goes on the first (a
    /// server stalled under a slow open loop is not sent more connections).
    /// `None` when it cannot leave at once, also before the first [`Self::unary`] call made
    /// the first connection.
    pub fn try_start_unary(&self, path: &str, frame: &Bytes) -> Option<StartedCall> {
        if self.inner.spreading.load(Ordering::Relaxed) == 0 {
            return self.live_unary()?.try_start(path, frame);
        }
        let mut pool = self.lock_unary();
        let live = pool.live();
        for free in live.iter().filter(|c| c.unanswered() == 0) {
            if let Some(call) = free.try_start(path, frame) {
                return Some(call);
            }
        }
        let first = live.first()?.clone();
        self.grow(&mut pool);
        drop(pool);
        first.try_start(path, frame)
    }

    /// Has one more lean connection made on the runtime, unless one is being made or the
    /// pool is full. A connect that fails leaves the pool as it was (the next send that
    /// finds no free connection tries again; calls go on the connections there are).
    fn grow(&self, pool: &mut UnaryPool) {
        if pool.growing || pool.connections.len() >= MAX_UNARY_CONNECTIONS {
            return;
        }
        pool.growing = true;
        let this = self.clone();
        self.inner.runtime.spawn(async move {
            let made = tcp_connect(&this.inner.address)
                .await
                .map(|tcp| UnaryConnection::start(tcp, this.inner.authority.as_str()));
            let mut pool = this.lock_unary();
            pool.growing = false;
            match made {
                Ok(connection) => pool.connections.push(connection),
                Err(e) => tracing::debug!("{}: one more unary connection: {e}", this.address()),
            }
        });
    }

    /// Reads of the lean connections' answers on the caller's thread (see
    /// [`UnaryConnection::defer_reads`]): on the connections live when they are deferred,
    /// and those made while they are.
    pub fn answer_reader(&self) -> DeferredReads {
        DeferredReads {
            connection: self.clone(),
            deferred: Vec::new(),
            reads: 0,
            spreading: false,
        }
    }

    fn lock_unary(&self) -> std::sync::MutexGuard<'_, UnaryPool> {
        self.inner.unary.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lean connections that take calls at once now, the first first.
    fn ready_unaries(&self) -> Vec<UnaryConnection> {
        let mut pool = self.lock_unary();
        pool.live()
            .iter()
            .filter(|c| c.is_ready())
            .cloned()
            .collect()
    }

    /// The first lean connection: every call that is not a direct send goes on it.
    fn live_unary(&self) -> Option<UnaryConnection> {
        self.lock_unary().live().first().cloned()
    }

    async fn unary_connection(&self) -> Result<UnaryConnection, Status> {
        if let Some(connection) = self.live_unary() {
            return Ok(connection);
        }
        let _connecting = self.inner.connecting.lock().await;
        if let Some(connection) = self.live_unary() {
            return Ok(connection);
        }
        let tcp = tcp_connect(&self.inner.address).await?;
        let connection = UnaryConnection::start(tcp, self.inner.authority.as_str());
        // First: the first connection died, and the others may too.
        self.lock_unary().connections.insert(0, connection.clone());
        Ok(connection)
    }

    fn stream_error(&self, e: h2::Error) -> Status {
        if e.is_io() || e.is_go_away() {
            return Status::unavailable(format!("{}: {e}", self.inner.address));
        }
        Status::from_error(Box::new(e))
    }
}

/// A TCP connection to `address` set up for calls: no Nagle delay, and dead-peer detection.
async fn tcp_connect(address: &str) -> Result<tokio::net::TcpStream, Status> {
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(address))
        .await
        .map_err(|_| Status::unavailable(format!("{address}: no TCP connection within 5s")))?
        .map_err(|e| Status::unavailable(format!("{address}: tcp connect error: {e}")))?;
    // Requests are small and latency-bound: never hold one back for Nagle.
    tcp.set_nodelay(true)
        .map_err(|e| Status::unavailable(format!("{address}: {e}")))?;
    // A peer that vanished without a reset (node lost, partition) must end the connection,
    // so the next call reconnects instead of every call running into its deadline. TCP
    // keepalive does it on an idle connection, the user timeout with data unacknowledged;
    // HTTP/2 PINGs would do the same, but Triton's gRPC server answers frequent PINGs
    // between calls with GOAWAY (too_many_pings).
    let socket = socket2::SockRef::from(&tcp);
    socket
        .set_tcp_keepalive(&KEEPALIVE)
        .and_then(|()| socket.set_tcp_user_timeout(Some(USER_TIMEOUT)))
        .map_err(|e| Status::unavailable(format!("{address}: setting TCP keepalive: {e}")))?;
    Ok(tcp)
}

/// tonic's generated client over this connection: each call's request body is piped onto its
/// HTTP/2 stream; a unary body is usually complete at once, so it leaves with its HEADERS.
impl tonic::codegen::Service<http::Request<tonic::body::Body>> for H2Connection {
    type Response = http::Response<ResponseBody>;
    type Error = Status;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Status>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        // Stream concurrency is waited for in `open`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let connection = self.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let end_of_stream = http_body::Body::is_end_stream(&body);
            let (response, send) = connection
                .open(http::Request::from_parts(parts, ()), end_of_stream)
                .await?;
            if !end_of_stream {
                let mut pipe = Box::pin(pipe_body(body, send));
                // Whatever the body has ready goes out now, with the HEADERS; a streaming body
                // goes on piping in its own task.
                if futures::poll!(pipe.as_mut()).is_pending() {
                    tokio::spawn(pipe);
                }
            }
            let response = response.await.map_err(|e| connection.stream_error(e))?;
            Ok(response.map(|recv| ResponseBody {
                recv,
                state: BodyState::Data,
            }))
        })
    }
}

/// Copies a request body onto its stream. Messages are small and each waits for its answer,
/// so the stream buffers them instead of reserving flow-control capacity first.
async fn pipe_body(mut body: tonic::body::Body, mut send: h2::SendStream<Bytes>) {
    use http_body_util::BodyExt;
    loop {
        match body.frame().await {
            None => {
                let _ = send.send_data(Bytes::new(), true);
                return;
            }
            Some(Ok(frame)) => {
                let sent = match frame.into_data() {
                    Ok(data) => send.send_data(data, false),
                    Err(frame) => match frame.into_trailers() {
                        Ok(trailers) => return drop(send.send_trailers(trailers)),
                        Err(_) => Ok(()),
                    },
                };
                if sent.is_err() {
                    return;
                }
            }
            Some(Err(_)) => {
                send.send_reset(h2::Reason::CANCEL);
                return;
            }
        }
    }
}

enum BodyState {
    Data,
    Trailers,
    Done,
}

/// A response stream as an `http_body::Body` for tonic; received data is handed back to the
/// flow-control window as soon as tonic takes it.
pub struct ResponseBody {
    recv: h2::RecvStream,
    state: BodyState,
}

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        loop {
            match this.state {
                BodyState::Data => match ready!(this.recv.poll_data(cx)) {
                    Some(Ok(data)) => {
                        let _ = this.recv.flow_control().release_capacity(data.len());
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                    None => this.state = BodyState::Trailers,
                },
                BodyState::Trailers => {
                    let trailers = ready!(this.recv.poll_trailers(cx));
                    this.state = BodyState::Done;
                    return Poll::Ready(match trailers {
                        Ok(Some(t)) => Some(Ok(Frame::trailers(t))),
                        Ok(None) => None,
                        Err(e) => Some(Err(e)),
                    });
                }
                BodyState::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, BodyState::Done)
    }
}

/// See [`H2Connection::answer_reader`]. Dropping it undefers.
pub struct DeferredReads {
    connection: H2Connection,
    /// The connections whose reads are deferred.
    deferred: Vec<UnaryConnection>,
    /// `read_now` calls so far.
    reads: u64,
    /// Counted in the connection's `spreading` (from the first deferral to the drop).
    spreading: bool,
}

impl DeferredReads {
    /// A read looks at a connection with no call unanswered once in this many (a server's
    /// PING, SETTINGS or WINDOW_UPDATE between calls waits at most that long); at those with
    /// one every time.
    const IDLE_READ_EVERY: u64 = 16;

    fn undefer(&mut self) {
        for connection in self.deferred.drain(..) {
            connection.defer_reads(false);
        }
    }

    fn is_deferred(&self, connection: &UnaryConnection) -> bool {
        self.deferred.iter().any(|d| d.same_as(connection))
    }
}

impl super::AnswerReader for DeferredReads {
    fn defer(&mut self, on: bool) -> bool {
        self.undefer();
        if !on {
            return false;
        }
        for connection in self.connection.ready_unaries() {
            if connection.defer_reads(true) {
                self.deferred.push(connection);
            }
        }
        if !self.deferred.is_empty() && !self.spreading {
            self.spreading = true;
            self.connection
                .inner
                .spreading
                .fetch_add(1, Ordering::Relaxed);
        }
        !self.deferred.is_empty()
    }

    /// Reads the deferred connections (and defers those made since): what the next call
    /// would find is the fewest calls unanswered on a connection, as it goes on that one.
    fn read_now(&mut self, wakers: &mut Vec<std::task::Waker>) -> super::AnswersRead {
        if self.deferred.is_empty() {
            return super::AnswersRead::default();
        }
        self.reads += 1;
        let idle_too = self.reads.is_multiple_of(Self::IDLE_READ_EVERY);
        let mut read = super::AnswersRead {
            uncertain: 0,
            unanswered: usize::MAX,
        };
        for connection in self.connection.ready_unaries() {
            if !self.is_deferred(&connection) {
                if !connection.defer_reads(true) {
                    continue;
                }
                self.deferred.push(connection.clone());
            }
            let unanswered = if idle_too || connection.unanswered() > 0 {
                let one = connection.read_now(wakers);
                read.uncertain += one.uncertain;
                one.unanswered
            } else {
                0
            };
            read.unanswered = read.unanswered.min(unanswered);
        }
        self.deferred.retain(|c| !c.is_closed());
        if read.unanswered == usize::MAX {
            read.unanswered = 0;
        }
        read
    }

    fn unanswered(&self) -> usize {
        self.connection
            .ready_unaries()
            .iter()
            .map(UnaryConnection::unanswered)
            .min()
            .unwrap_or(0)
    }
}

impl Drop for DeferredReads {
    fn drop(&mut self) {
        self.undefer();
        if self.spreading {
            self.connection
                .inner
                .spreading
                .fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::AnswerReader;
    use super::super::unary_h2::tests::{
        WindowUpdate, grpc_frame, slow_server_acknowledging_each_request,
    };
    use super::*;
    use std::task::Waker;
    use std::time::Instant;

    /// Sends one call now and reads nothing: (when it left, the call).
    fn send(connection: &H2Connection) -> (Instant, StartedCall) {
        let sent = Instant::now();
        let mut call = connection
            .try_start_unary("/slow", &grpc_frame(b"q"))
            .expect("the call leaves at once");
        let mut cx = Context::from_waker(Waker::noop());
        assert!(Pin::new(&mut call).poll(&mut cx).is_pending());
        (sent, call)
    }

    /// Each call's latency to the receive time its answer was given (panics if unanswered).
    fn latencies(calls: Vec<(Instant, StartedCall)>) -> Vec<Duration> {
        let mut cx = Context::from_waker(Waker::noop());
        calls
            .into_iter()
            .map(|(sent, mut call)| match Pin::new(&mut call).poll(&mut cx) {
                Poll::Ready(Ok(answer)) => {
                    answer.arrived.expect("a receive time").duration_since(sent)
                }
                other => panic!("not answered: {:?}", other.map(|r| r.map(|_| ()))),
            })
            .collect()
    }

    /// An open loop's calls that come faster than their answers, with reads deferred: the
    /// first finds every connection busy and has one more made; from then on each call goes
    /// on a connection with nothing unanswered, so answers that wait together for the reader
    /// wait in different sockets, and each keeps its own receive time, certain. On one
    /// connection the kernel merges them and one of them is late or uncertain. Without
    /// deferred reads every call goes on the first connection.
    #[test]
    fn calls_faster_than_their_answers_go_on_connections_of_their_own_and_keep_their_times() {
        let ms = Duration::from_millis;
        let delay = ms(60);
        let address = slow_server_acknowledging_each_request(
            delay,
            grpc_frame(b"late"),
            WindowUpdate::AtOnce,
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let connection = runtime.block_on(async {
            let connection = H2Connection::connect(&address).await.unwrap();
            let first = connection.unary("/first", grpc_frame(b"q")).await.unwrap();
            assert_eq!(&first.message[..], b"late");
            connection
        });
        let _entered = runtime.enter();
        // Reads not deferred: calls go on the first connection, one at a time or not.
        let undeferred = vec![send(&connection), send(&connection)];
        let answered = runtime.block_on(async {
            let mut answered = 0;
            for (_, call) in undeferred {
                answered += usize::from(call.await.is_ok());
            }
            answered
        });
        assert_eq!(answered, 2);
        std::thread::sleep(ms(100));
        assert_eq!(
            connection.ready_unaries().len(),
            1,
            "more connections unasked"
        );

        let mut reader = connection.answer_reader();
        assert!(reader.defer(true), "reads not deferred");
        let mut wakers = Vec::new();
        // Two calls at once on one connection: the second has a connection made.
        let warm_up = vec![send(&connection), send(&connection)];
        let deadline = Instant::now() + Duration::from_secs(10);
        while connection.ready_unaries().len() < 2
            || connection
                .ready_unaries()
                .iter()
                .any(|c| c.unanswered() > 0)
        {
            assert!(Instant::now() < deadline, "no second connection");
            reader.read_now(&mut wakers);
            std::thread::sleep(ms(5));
        }
        assert_eq!(latencies(warm_up).len(), 2);
        // Both idle: a read defers the new one too and finds nothing unanswered.
        assert_eq!(reader.read_now(&mut wakers).unanswered, 0);

        let start = Instant::now();
        let first = send(&connection);
        std::thread::sleep((start + ms(20)).saturating_duration_since(Instant::now()));
        let second = send(&connection);
        // Both answers arrive (at 60 and 80 ms) and wait for this read.
        std::thread::sleep((start + ms(150)).saturating_duration_since(Instant::now()));
        let read = reader.read_now(&mut wakers);
        let latencies = latencies(vec![first, second]);
        for latency in &latencies {
            assert!(
                *latency >= delay && *latency < delay + ms(25),
                "{latencies:?} against {delay:?}"
            );
        }
        assert_eq!(read.uncertain, 0, "{latencies:?}");
        assert_eq!(read.unanswered, 0);
        assert_eq!(
            connection.ready_unaries().len(),
            2,
            "one connection per call"
        );
    }
}
