//! A userspace TCP proxy between a server and its clients, for injected network faults: it
//! passes bytes through untouched until told to shape them, then holds each chunk read from
//! either side for `delay` plus a random share of `jitter` before writing it on. Chunks keep
//! their order (a chunk never leaves before the one read before it), as TCP's bytes do, so the
//! streams above (HTTP/1.1, HTTP/2 for gRPC) see a slow network, never a broken one.
//!
//! Loss is not done here: a dropped segment inside one TCP connection is retransmitted by the
//! kernel, which a proxy above TCP cannot imitate without breaking the stream. It takes packet
//! filtering (iptables `-m statistic`), which the local launcher does not have.

use rand::Rng;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// What the proxy does to the bytes it forwards while a fault lasts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shaping {
    /// Added to every chunk's way, in each direction.
    pub delay: Duration,
    /// A random extra delay from zero up to this, drawn per chunk.
    pub jitter: Duration,
}

impl Shaping {
    /// When a chunk read at `now` may be written on: after the chunk before it (`previous`),
    /// and not before its own delay (`draw` in [0, 1) picks its share of the jitter).
    pub fn release(&self, now: Instant, previous: Instant, draw: f64) -> Instant {
        let own = now + self.delay + self.jitter.mul_f64(draw.clamp(0.0, 1.0));
        own.max(previous)
    }
}

/// A proxy listening on a free loopback port, forwarding every connection to `upstream`.
pub struct FaultProxy {
    address: String,
    shaping: Arc<Mutex<Option<Shaping>>>,
    /// While true, every connection is closed and new ones are closed as they come: the
    /// upstream is cut off (an `api-outage`).
    cut: tokio::sync::watch::Sender<bool>,
    /// Accepts connections; owns the connections' tasks, which end with it.
    task: JoinHandle<()>,
}

impl FaultProxy {
    pub async fn start(upstream: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?.to_string();
        let shaping = Arc::new(Mutex::new(None));
        let (cut, cut_seen) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(accept(
            listener,
            upstream.to_string(),
            shaping.clone(),
            cut_seen,
        ));
        Ok(FaultProxy {
            address,
            shaping,
            cut,
            task,
        })
    }

    /// Where clients connect instead of the server.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Starts shaping (Some) or stops (None); takes effect from the next chunk read.
    pub fn shape(&self, shaping: Option<Shaping>) {
        *self.shaping.lock().expect("shaping lock") = shaping;
    }

    /// Cuts the upstream off (true: every connection closed, new ones closed at once) or
    /// lets connections through again (false).
    pub fn cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("address", &self.address)
            .field("cut", &*self.cut.borrow())
            .finish()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(
    listener: TcpListener,
    upstream: String,
    shaping: Arc<Mutex<Option<Shaping>>>,
    cut: tokio::sync::watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        // Reap what has ended, so a soak's reconnections do not pile up.
        while connections.try_join_next().is_some() {}
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        if *cut.borrow() {
            continue; // dropped: closed at once
        }
        let upstream = upstream.clone();
        let shaping = shaping.clone();
        let mut cut = cut.clone();
        connections.spawn(async move {
            tokio::select! {
                _ = forward(client, &upstream, shaping) => {}
                _ = cut.wait_for(|cut| *cut) => {} // both sockets dropped: closed
            }
        });
    }
}

/// One client's connection to `upstream`, forwarded both ways until either side closes.
async fn forward(client: TcpStream, upstream: &str, shaping: Arc<Mutex<Option<Shaping>>>) {
    // A server down (killed, restarting) refuses the client as it would have itself.
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::join!(
        pump(client_read, server_write, shaping.clone()),
        pump(server_read, client_write, shaping),
    );
}

/// One direction of a connection: a reader that stamps each chunk with its release time, and a
/// writer that sends it then (reading goes on meanwhile: delay is latency, not a lower rate).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shaping: Arc<Mutex<Option<Shaping>>>,
) {
    let (send, mut receive) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = async move {
        let mut previous = Instant::now();
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let now = Instant::now();
            let current = *shaping.lock().expect("shaping lock");
            let release = match current {
                Some(s) => s.release(now, previous, rand::rng().random::<f64>()),
                None => now.max(previous),
            };
            previous = release;
            if send.send((release, buffer[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let writer = async move {
        while let Some((release, chunk)) = receive.recv().await {
            tokio::time::sleep_until(release).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        // The other side closed: pass the end on.
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_keep_their_order_and_wait_at_least_the_delay() {
        let s = Shaping {
            delay: Duration::from_millis(100),
            jitter: Duration::from_millis(50),
        };
        let t0 = Instant::now();
        let first = s.release(t0, t0, 0.9);
        assert_eq!(first, t0 + Duration::from_millis(145));
        // Read 1 ms later with no jitter: it would leave before the first; it waits for it.
        let second = s.release(t0 + Duration::from_millis(1), first, 0.0);
        assert_eq!(second, first);
        let later = s.release(t0 + Duration::from_secs(1), second, 0.0);
        assert_eq!(later, t0 + Duration::from_millis(1100));
        let none = Shaping::default();
        assert_eq!(none.release(t0, t0, 0.5), t0);
    }

    async fn echo_server() -> (String, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (address, task)
    }

    async fn round_trip(address: &str, message: &[u8]) -> Duration {
        let mut s = TcpStream::connect(address).await.unwrap();
        s.set_nodelay(true).unwrap();
        let started = std::time::Instant::now();
        s.write_all(message).await.unwrap();
        let mut back = vec![0u8; message.len()];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(back, message);
        started.elapsed()
    }

    #[tokio::test]
    async fn a_cut_closes_every_connection_and_refuses_new_ones_until_it_ends() {
        let (server, _echo) = echo_server().await;
        let proxy = FaultProxy::start(&server).await.unwrap();
        let mut open = TcpStream::connect(proxy.address()).await.unwrap();
        round_trip(proxy.address(), b"before").await;
        proxy.cut(true);
        // The open connection is closed: its read ends (0 bytes or an error), never an echo.
        let _ = open.write_all(b"during").await;
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(5), open.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
        // A new one is closed as it comes.
        let mut fresh = TcpStream::connect(proxy.address()).await.unwrap();
        let _ = fresh.write_all(b"during").await;
        let read = tokio::time::timeout(Duration::from_secs(5), fresh.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
        proxy.cut(false);
        round_trip(proxy.address(), b"after").await;
    }

    #[tokio::test]
    async fn passes_bytes_through_and_delays_both_ways_only_while_shaping() {
        let (server, _echo) = echo_server().await;
        let proxy = FaultProxy::start(&server).await.unwrap();
        // Generous bounds for a loaded machine: what is checked is 400 ms each way, or none.
        let plain = round_trip(proxy.address(), b"hello").await;
        assert!(plain < Duration::from_millis(400), "{plain:?}");
        proxy.shape(Some(Shaping {
            delay: Duration::from_millis(400),
            jitter: Duration::ZERO,
        }));
        let slow = round_trip(proxy.address(), b"slow").await;
        assert!(
            slow >= Duration::from_millis(800),
            "400 ms each way: {slow:?}"
        );
        proxy.shape(None);
        let again = round_trip(proxy.address(), b"fast again").await;
        assert!(again < Duration::from_millis(400), "{again:?}");
        drop(proxy);
    }

    #[tokio::test]
    async fn a_server_that_is_down_is_a_closed_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gone = listener.local_addr().unwrap().to_string();
        drop(listener);
        let proxy = FaultProxy::start(&gone).await.unwrap();
        let mut s = TcpStream::connect(proxy.address()).await.unwrap();
        let mut buf = [0u8; 8];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("closed, not hung");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    }
}
