//! HTTP/1.1 requests written by the thread or task that queues them (the open loop's pacer, a
//! closed-loop sender), not by the connection's own task.
//!
//! hyper's client connection (`hyper::client::conn::http1`) does all of the protocol. What is
//! ours is who polls it: a task on the runtime drives each connection as usual (responses,
//! keep-alive, its end), and a thread that queues a request then polls the same connection once
//! itself, under the lock the task polls it with and with the task's waker, so hyper writes the
//! request from that thread at once and every wake-up still goes to the task. Without this an
//! HTTP request leaves only when the runtime next runs the connection's task: a thread wake-up
//! on the runtime, then a task hop, each tens of microseconds on a busy machine.
//!
//! HTTP/1.1 carries one request at a time per connection, so a pool holds as many connections
//! as requests have been in flight at once (up to [`MAX_CONNECTIONS`]). A send that finds none
//! idle returns `None` (the caller sends it the ordinary way) and has one more connection made
//! on the runtime for the next.

use super::ClientError;
use super::receive_stamp::{LastReceive, StampedTcp};
use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper::{Request, Response, body::Incoming};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// Connections a pool keeps at most: requests in flight at once beyond this go the ordinary way.
pub const MAX_CONNECTIONS: usize = 256;

/// After a connect fails, the pool makes no new one for this long (a server that is down gets
/// one attempt per interval from the pool, not one per send).
const RETRY_AFTER_FAILED_CONNECT: Duration = Duration::from_millis(200);

/// A connect unanswered this long has failed (an address that drops packets would otherwise
/// hold the pool's one connect for the kernel's minutes of retries); reqwest's is the same.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

type Body = Full<Bytes>;
type Conn = Connection<TokioIo<StampedTcp>, Body>;

/// The response to a request already written.
pub type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<Response<Incoming>, hyper::Error>> + Send>>;

/// A request written from the sending thread: its response to come, when it was written, and
/// its connection's last receive time (that of its answer, once the answer is read whole).
pub struct DirectSend {
    pub response: ResponseFuture,
    /// Just before the write.
    pub sent_at: Instant,
    pub received: Arc<LastReceive>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keep-alive HTTP/1.1 connections to one server whose requests the sending thread writes.
pub struct DirectPool {
    authority: String,
    runtime: tokio::runtime::Handle,
    state: Arc<Mutex<PoolState>>,
}

#[derive(Default)]
struct PoolState {
    connections: Vec<DirectConnection>,
    connecting: bool,
    no_connect_before: Option<Instant>,
}

struct DirectConnection {
    sender: SendRequest<Body>,
    driven: Arc<Driven>,
    received: Arc<LastReceive>,
}

/// A connection and the waker of the task that drives it.
struct Driven {
    /// None once the connection has ended.
    connection: Mutex<Option<Conn>>,
    task: Mutex<Option<Waker>>,
}

impl Driven {
    /// Polls the connection with the driving task's waker: hyper writes what was queued (and
    /// reads what has arrived) on this thread, and whatever it then waits for wakes the task.
    fn poll_here(&self) {
        let Some(waker) = lock(&self.task).clone() else {
            // The task has not run yet: its first poll writes the request.
            return;
        };
        let mut connection = lock(&self.connection);
        if let Some(c) = connection.as_mut()
            && Pin::new(c)
                .poll(&mut Context::from_waker(&waker))
                .is_ready()
        {
            *connection = None;
            // The task sees the end at its next poll.
            waker.wake();
        }
    }
}

/// The runtime's side of a connection: polls it until it ends.
struct Drive(Arc<Driven>);

impl Future for Drive {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        {
            let mut task = lock(&self.0.task);
            if !task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        let mut connection = lock(&self.0.connection);
        match connection.as_mut() {
            None => Poll::Ready(()),
            Some(c) => match Pin::new(c).poll(cx) {
                Poll::Pending => Poll::Pending,
                // An error here ends the connection; its request's future gets the error.
                Poll::Ready(_) => {
                    *connection = None;
                    Poll::Ready(())
                }
            },
        }
    }
}

impl DirectPool {
    /// A pool for `authority` (host:port) whose connections the given runtime drives.
    pub fn new(authority: &str, runtime: tokio::runtime::Handle) -> Self {
        Self {
            authority: authority.to_string(),
            runtime,
            state: Arc::default(),
        }
    }

    /// Writes `request` now, from this thread, on an idle connection; its response to come.
    /// None when no connection is idle (one more is then made for the next send).
    pub fn send_now(&self, request: Request<Body>) -> Option<DirectSend> {
        self.try_send(request).ok()
    }

    /// [`Self::send_now`], or, when no connection is idle, on a connection made for it now
    /// (kept for later sends): for a request that must go this way whatever the pool's state,
    /// as a traced one, which carries its answer's receive time only this way. The connect is
    /// before the request's `sent_at`: the client's own time.
    pub async fn send_on_any(&self, request: Request<Body>) -> Result<DirectSend, ClientError> {
        let request = match self.try_send(request) {
            Ok(sent) => return Ok(sent),
            Err(request) => *request,
        };
        let mut connection = connect(&self.authority, CONNECT_TIMEOUT).await?;
        connection.sender.ready().await.map_err(|e| {
            ClientError::Transport(format!("{}: HTTP/1.1 connection: {e}", self.authority))
        })?;
        let response = connection.sender.send_request(request);
        let sent = written(response, &connection.driven, &connection.received);
        let mut state = lock(&self.state);
        if state.connections.len() < MAX_CONNECTIONS {
            state.connections.push(connection);
        }
        Ok(sent)
    }

    /// Writes `request` on an idle connection, or gives it back when none is idle (and has
    /// one more made for the next send; boxed: that is the rare case).
    fn try_send(&self, request: Request<Body>) -> Result<DirectSend, Box<Request<Body>>> {
        let (response, driven, received) = {
            let mut state = lock(&self.state);
            state.connections.retain(|c| !c.sender.is_closed());
            match state.connections.iter_mut().find(|c| c.sender.is_ready()) {
                Some(c) => (
                    c.sender.send_request(request),
                    c.driven.clone(),
                    c.received.clone(),
                ),
                None => {
                    self.grow(&mut state);
                    return Err(Box::new(request));
                }
            }
        };
        Ok(written(response, &driven, &received))
    }

    /// Has one more connection made on the runtime, unless one is being made, the pool is
    /// full, or a connect failed a moment ago.
    fn grow(&self, state: &mut PoolState) {
        if state.connecting
            || state.connections.len() >= MAX_CONNECTIONS
            || state.no_connect_before.is_some_and(|t| Instant::now() < t)
        {
            return;
        }
        state.connecting = true;
        let pool = self.state.clone();
        let authority = self.authority.clone();
        self.runtime.spawn(async move {
            let made = connect(&authority, CONNECT_TIMEOUT).await;
            let mut state = lock(&pool);
            state.connecting = false;
            match made {
                Ok(connection) => state.connections.push(connection),
                Err(e) => {
                    // The send that needed it went the ordinary way, which reports the error.
                    tracing::debug!("{authority}: HTTP/1.1 connection for direct sends: {e}");
                    state.no_connect_before = Some(Instant::now() + RETRY_AFTER_FAILED_CONNECT);
                }
            }
        });
    }
}

/// A request queued on `connection`, written now from this thread.
fn written(
    response: impl Future<Output = Result<Response<Incoming>, hyper::Error>> + Send + 'static,
    driven: &Driven,
    received: &Arc<LastReceive>,
) -> DirectSend {
    let sent_at = Instant::now();
    driven.poll_here();
    DirectSend {
        response: Box::pin(response),
        sent_at,
        received: received.clone(),
    }
}

/// Connects, handshakes and starts the task that drives the connection; the task's first poll
/// makes the connection ready for a request.
async fn connect(authority: &str, within: Duration) -> Result<DirectConnection, ClientError> {
    let transport = |e: String| ClientError::Transport(format!("{authority}: {e}"));
    let tcp = tokio::time::timeout(within, TcpStream::connect(authority))
        .await
        .map_err(|_| transport(format!("connect: no answer within {within:?}")))?
        .map_err(|e| transport(format!("connect: {e}")))?;
    tcp.set_nodelay(true)
        .map_err(|e| transport(format!("TCP_NODELAY: {e}")))?;
    let (tcp, received) = StampedTcp::new(tcp);
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| transport(format!("HTTP/1.1 handshake: {e}")))?;
    let driven = Arc::new(Driven {
        connection: Mutex::new(Some(connection)),
        task: Mutex::new(None),
    });
    tokio::spawn(Drive(driven.clone()));
    Ok(DirectConnection {
        sender,
        driven,
        received,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::io::{Read, Write};

    impl DirectPool {
        /// Connections open now.
        fn connections(&self) -> usize {
            let mut state = lock(&self.state);
            state.connections.retain(|c| !c.sender.is_closed());
            state.connections.len()
        }

        /// Makes one connection now.
        async fn connect_one(&self) -> Result<(), ClientError> {
            let connection = connect(&self.authority, CONNECT_TIMEOUT).await?;
            lock(&self.state).connections.push(connection);
            Ok(())
        }
    }

    /// Reads one HTTP/1.1 request (head and a Content-Length body) from a blocking socket.
    fn read_request(socket: &mut std::net::TcpStream) -> Option<String> {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&got).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .map_or(0, |n| n.trim().parse::<usize>().unwrap());
                if got.len() >= end + 4 + length {
                    return Some(text);
                }
            }
            let n = socket.read(&mut buf).ok()?;
            if n == 0 {
                return None;
            }
            got.extend_from_slice(&buf[..n]);
        }
    }

    fn request(authority: &str, body: &'static [u8]) -> Request<Body> {
        Request::post("/v2/models/m/infer")
            .header(hyper::header::HOST, authority)
            .body(Full::new(Bytes::from_static(body)))
            .unwrap()
    }

    /// The runtime is idle (nothing calls `block_on`) while a plain thread sends: the request
    /// reaches the server all the same, so that thread wrote it. Then the runtime takes the
    /// response, and the connection serves the next request.
    #[test]
    fn a_request_sent_from_a_plain_thread_leaves_without_the_runtime() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let authority = listener.local_addr().unwrap().to_string();
        let (requests, received) = std::sync::mpsc::channel();
        let server = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            while let Some(request) = read_request(&mut socket) {
                requests.send(request).unwrap();
                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                if socket.write_all(answer).is_err() {
                    break;
                }
            }
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let pool = DirectPool::new(&authority, runtime.handle().clone());
        runtime.block_on(async {
            pool.connect_one().await.unwrap();
            // The driving task's first poll makes the connection ready.
            tokio::task::yield_now().await;
        });
        for body in [&b"first"[..], b"second"] {
            let sent = pool
                .send_now(request(&authority, body))
                .expect("an idle connection");
            let response = sent.response;
            let arrived = received
                .recv_timeout(Duration::from_secs(5))
                .expect("the request left while the runtime was idle");
            assert!(arrived.starts_with("POST /v2/models/m/infer HTTP/1.1\r\n"));
            assert!(
                arrived.ends_with(std::str::from_utf8(body).unwrap()),
                "{arrived}"
            );
            let answer = runtime.block_on(async {
                let response = response.await.unwrap();
                assert_eq!(response.status(), 200);
                let body = response.into_body().collect().await.unwrap().to_bytes();
                // The driving task readies the connection for the next request.
                tokio::task::yield_now().await;
                body
            });
            assert_eq!(&answer[..], b"ok");
        }
        assert_eq!(pool.connections(), 1);
        drop(pool);
        drop(runtime);
        server.join().unwrap();
    }

    /// No idle connection: the send is refused (the caller sends it the ordinary way) and the
    /// pool makes one for the next; a server that refuses connections gets no connection.
    #[test]
    fn a_send_without_an_idle_connection_is_refused_and_grows_the_pool() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let authority = listener.local_addr().unwrap().to_string();
        let pool = DirectPool::new(&authority, runtime.handle().clone());
        assert!(pool.send_now(request(&authority, b"x")).is_none());
        runtime.block_on(async {
            for _ in 0..200 {
                if pool.connections() == 1 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        assert_eq!(pool.connections(), 1);

        drop(listener);
        let closed = DirectPool::new(&authority, runtime.handle().clone());
        assert!(closed.send_now(request(&authority, b"x")).is_none());
        runtime.block_on(async { tokio::time::sleep(Duration::from_millis(50)).await });
        assert_eq!(closed.connections(), 0);
        assert!(runtime.block_on(closed.connect_one()).is_err());
    }

    /// No connection idle: `send_on_any` makes one for its request, which is answered and
    /// carries its answer's receive time; the pool keeps the connection.
    #[test]
    fn a_request_that_must_go_direct_gets_a_connection_of_its_own() {
        crate::client::receive_stamp::stamps_on();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let authority = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            read_request(&mut socket).unwrap();
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .unwrap();
            // Keep the connection open until the client is done.
            let _ = read_request(&mut socket);
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let pool = DirectPool::new(&authority, runtime.handle().clone());
        runtime.block_on(async {
            let sent = pool
                .send_on_any(request(&authority, b"x"))
                .await
                .expect("a connection made for it");
            let response = sent.response.await.unwrap();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"ok");
            let received = sent.received.instant().expect("the answer's receive time");
            assert!(received >= sent.sent_at, "received before it was sent");
        });
        // Its own (and the one the refused send has made for the next, once made).
        assert!((1..=2).contains(&pool.connections()));
        drop(pool);
        drop(runtime);
        server.join().unwrap();
    }

    /// A server whose accept queue is full drops the SYN, as an address that drops packets
    /// does: the connect fails after its bound instead of the kernel's minutes of retries.
    #[test]
    fn a_connect_that_gets_no_answer_fails_within_its_bound() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let socket =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket
            .bind(
                &"127.0.0.1:0"
                    .parse::<std::net::SocketAddr>()
                    .unwrap()
                    .into(),
            )
            .unwrap();
        socket.listen(0).unwrap();
        let address = socket.local_addr().unwrap().as_socket().unwrap();
        // Fill the queue (never accepted): later SYNs are dropped.
        let mut queued = Vec::new();
        let filled = (0..8).any(|_| {
            let attempt =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            let answered = attempt
                .connect_timeout(&address.into(), Duration::from_millis(300))
                .is_ok();
            queued.push(attempt);
            !answered
        });
        assert!(filled, "the accept queue never filled");
        let failed = runtime
            .block_on(connect(&address.to_string(), Duration::from_millis(200)))
            .err()
            .expect("no connection");
        assert!(
            failed.to_string().contains("no answer within 200ms"),
            "{failed}"
        );
    }
}
