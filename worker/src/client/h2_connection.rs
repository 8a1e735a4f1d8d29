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
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// The lean connection for unary calls; `None` before the first call.
    unary: Mutex<Option<UnaryConnection>>,
    /// Held while connecting, so concurrent calls on a dead connection make one new one.
    connecting: tokio::sync::Mutex<()>,
}

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
                unary: Mutex::new(None),
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
        let mut retried = false;
        loop {
            let connection = self.unary_connection().await?;
            match connection.call(path, frame.clone()).await {
                Ok(outcome) => return outcome,
                Err(why) if retried => return Err(Status::unavailable(why.to_string())),
                Err(_) => retried = true,
            }
        }
    }

    /// A unary call sent now, from any thread, without waiting (see
    /// [`UnaryConnection::try_start`]); `None` when it cannot leave at once, also before the
    /// first [`Self::unary`] call made the connection.
    pub fn try_start_unary(&self, path: &str, frame: &Bytes) -> Option<StartedCall> {
        self.live_unary()?.try_start(path, frame)
    }

    /// Reads of the unary connection's answers on the caller's thread (see
    /// [`UnaryConnection::defer_reads`]): on the connection live when they are deferred.
    pub fn answer_reader(&self) -> DeferredReads {
        DeferredReads {
            connection: self.clone(),
            deferred: None,
        }
    }

    fn live_unary(&self) -> Option<UnaryConnection> {
        let current = self.inner.unary.lock().unwrap_or_else(|e| e.into_inner());
        current.as_ref().filter(|c| !c.is_closed()).cloned()
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
        *self.inner.unary.lock().unwrap_or_else(|e| e.into_inner()) = Some(connection.clone());
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
    /// The connection whose reads are deferred.
    deferred: Option<UnaryConnection>,
}

impl super::AnswerReader for DeferredReads {
    fn defer(&mut self, on: bool) -> bool {
        if let Some(connection) = self.deferred.take() {
            connection.defer_reads(false);
        }
        if !on {
            return false;
        }
        match self.connection.live_unary() {
            Some(connection) if connection.defer_reads(true) => {
                self.deferred = Some(connection);
                true
            }
            _ => false,
        }
    }

    fn read_now(&mut self, wakers: &mut Vec<std::task::Waker>) -> super::AnswersRead {
        self.deferred
            .as_ref()
            .map_or_else(Default::default, |connection| connection.read_now(wakers))
    }

    fn unanswered(&self) -> usize {
        self.connection
            .live_unary()
            .map_or(0, |connection| connection.unanswered())
    }
}

impl Drop for DeferredReads {
    fn drop(&mut self) {
        if let Some(connection) = self.deferred.take() {
            connection.defer_reads(false);
        }
    }
}
