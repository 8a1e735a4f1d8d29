//! The kernel's receive time of what a TCP socket reads (`SO_TIMESTAMPNS`): when an answer
//! arrived, not when the worker's runtime got round to reading it. A client short of CPU reads
//! late; with the stamp that wait is the client's own time in a traced request's split, not the
//! wire's. Both of the load's own paths read this way: gRPC's lean HTTP/2 connection
//! (`unary_h2`) and HTTP/1.1's direct pool (`http1_direct`, through [`StampedTcp`]).

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// A receive stamp older than this is a step of the wall clock, not a wait: the read is then
/// timed as it happens.
const MAX_STAMP_AGE: Duration = Duration::from_secs(10);

/// Asks the kernel to stamp what `tcp` receives. Best effort: without it answers are timed when
/// read.
pub fn enable(tcp: &impl std::os::fd::AsFd) -> nix::Result<()> {
    nix::sys::socket::setsockopt(tcp, nix::sys::socket::sockopt::ReceiveTimestampns, &true)
}

/// One `recvmsg` into `buffer`: the bytes read, and the kernel's receive time of the last
/// segment they came from (when the socket gives one; the wall clock's, as the kernel stamps).
pub fn recv_stamped(
    socket: &impl AsRawFd,
    buffer: &mut [u8],
    control: &mut [u8],
    flags: nix::sys::socket::MsgFlags,
) -> std::io::Result<(usize, Option<SystemTime>)> {
    use nix::sys::socket::{ControlMessageOwned, recvmsg};
    let mut iov = [std::io::IoSliceMut::new(buffer)];
    let message = recvmsg::<()>(socket.as_raw_fd(), &mut iov, Some(control), flags)
        .map_err(std::io::Error::from)?;
    let stamp = message.cmsgs().ok().and_then(|mut cmsgs| {
        cmsgs.find_map(|c| match c {
            ControlMessageOwned::ScmTimestampns(t) => Some(t),
            _ => None,
        })
    });
    let stamp = stamp.and_then(|t| {
        let secs = u64::try_from(t.tv_sec()).ok()?;
        let nanos = u32::try_from(t.tv_nsec()).ok()?;
        Some(SystemTime::UNIX_EPOCH + Duration::new(secs, nanos))
    });
    Ok((message.bytes, stamp))
}

/// The monotonic time of a wall-clock `stamp` taken a moment ago (the kernel stamps with the
/// wall clock). A stamp "in the future" (the wall clock stepped back) is now; one older than
/// [`MAX_STAMP_AGE`] is unknown.
pub fn stamp_instant(stamp: SystemTime) -> Option<Instant> {
    let (wall, now) = (SystemTime::now(), Instant::now());
    let age = wall.duration_since(stamp).unwrap_or(Duration::ZERO);
    if age > MAX_STAMP_AGE {
        return None;
    }
    now.checked_sub(age)
}

/// The receive time of the last bytes a [`StampedTcp`] read, shared with whoever waits on the
/// connection's answer (HTTP/1.1 carries one answer at a time, so once an answer is read whole,
/// this is when its last segment arrived).
/// Nanoseconds since the Unix epoch; 0 before the first stamped read (every read of every
/// HTTP/1.1 load connection sets it: an atomic store, no lock).
#[derive(Debug, Default)]
pub struct LastReceive(AtomicU64);

impl LastReceive {
    /// The monotonic time of the last stamped read; None before one, or for a stale stamp.
    pub fn instant(&self) -> Option<Instant> {
        let nanos = self.0.load(Ordering::Relaxed);
        (nanos > 0)
            .then(|| SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos))
            .and_then(stamp_instant)
    }

    fn set(&self, stamp: SystemTime) {
        let nanos = stamp
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(0));
        self.0.store(nanos, Ordering::Relaxed);
    }
}

/// A TCP stream whose reads are `recvmsg` calls that keep the kernel's receive time of what they
/// read in [`LastReceive`]; writes go to the stream unchanged.
pub struct StampedTcp {
    tcp: TcpStream,
    control: Vec<u8>,
    last: Arc<LastReceive>,
}

impl StampedTcp {
    /// Wraps `tcp`, its stamps enabled (when the kernel allows).
    pub fn new(tcp: TcpStream) -> (Self, Arc<LastReceive>) {
        if let Err(e) = enable(&tcp) {
            tracing::debug!("no kernel receive timestamps: {e}");
        }
        let last = Arc::new(LastReceive::default());
        let stream = Self {
            tcp,
            control: nix::cmsg_space!(nix::sys::time::TimeSpec),
            last: last.clone(),
        };
        (stream, last)
    }
}

impl AsyncRead for StampedTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            ready!(this.tcp.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let flags = nix::sys::socket::MsgFlags::MSG_DONTWAIT;
            let read = this.tcp.try_io(Interest::READABLE, || {
                recv_stamped(&this.tcp, unfilled, &mut this.control, flags)
            });
            match read {
                Ok((n, stamp)) => {
                    if let Some(stamp) = stamp.filter(|_| n > 0) {
                        this.last.set(stamp);
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                // Readiness was stale: `try_io` cleared it, so the next poll waits.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for StampedTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// Holds receive stamps on from now: the kernel turns them on for the whole machine a moment
/// after the first socket asks (a deferred static key) and off when the last such socket
/// closes, so the first answers of a process's first stamped connection may come unstamped
/// (half of the runs of a unit test whose server answered at once, measured). A worker holds
/// this from its start, well before its first request; without it answers are timed when read.
pub fn hold_on() -> io::Result<std::net::UdpSocket> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    enable(&socket).map_err(io::Error::from)?;
    Ok(socket)
}

/// For tests that need stamps: holds them on for the test process and returns once a read has
/// carried one (see [`hold_on`]).
#[cfg(test)]
pub fn stamps_on() {
    use std::io::Write;
    static ON: std::sync::OnceLock<(std::net::TcpStream, std::net::TcpStream)> =
        std::sync::OnceLock::new();
    ON.get_or_init(|| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let reader = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut writer, _) = listener.accept().unwrap();
        enable(&reader).unwrap();
        reader.set_nonblocking(true).unwrap();
        let mut control = nix::cmsg_space!(nix::sys::time::TimeSpec);
        let flags = nix::sys::socket::MsgFlags::MSG_DONTWAIT;
        for _ in 0..2000 {
            writer.write_all(b"x").unwrap();
            std::thread::sleep(Duration::from_millis(1));
            if let Ok((1, Some(_))) = recv_stamped(&reader, &mut [0u8; 8], &mut control, flags) {
                return (reader, writer);
            }
        }
        panic!("the kernel gives no receive stamps");
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn a_receive_stamp_becomes_a_monotonic_time_and_a_wall_clock_step_is_not_a_latency() {
        let now = Instant::now();
        let five_ms_ago = stamp_instant(SystemTime::now() - Duration::from_millis(5)).unwrap();
        let age = now.saturating_duration_since(five_ms_ago);
        assert!(
            age >= Duration::from_millis(4) && age < Duration::from_millis(50),
            "{age:?}"
        );
        // The wall clock stepped back after the stamp: the stamp is "now", not a negative age.
        let ahead = stamp_instant(SystemTime::now() + Duration::from_secs(60)).unwrap();
        assert!(ahead >= now && ahead <= Instant::now());
        // Stepped forward (or a stamp from long ago): unknown, the read is timed instead.
        assert!(stamp_instant(SystemTime::now() - Duration::from_secs(3600)).is_none());
    }

    /// Bytes that wait 200 ms in the socket before the stream reads them keep the time they
    /// arrived: the wait is the reader's, not the wire's.
    #[tokio::test]
    async fn bytes_read_late_keep_the_time_they_arrived() {
        stamps_on();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (tcp, accepted) = tokio::join!(TcpStream::connect(address), listener.accept());
        let (mut stream, last) = StampedTcp::new(tcp.unwrap());
        let (mut server, _) = accepted.unwrap();
        server.write_all(b"answer").await.unwrap();
        let written = Instant::now();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut got = [0u8; 16];
        let n = stream.read(&mut got).await.unwrap();
        let read = Instant::now();
        assert_eq!(&got[..n], b"answer");
        let arrived = last.instant().expect("a stamp");
        assert!(
            read.duration_since(arrived) >= Duration::from_millis(150),
            "stamped {:?} before the read",
            read.duration_since(arrived)
        );
        assert!(
            arrived.saturating_duration_since(written) < Duration::from_millis(50),
            "{:?}",
            arrived.saturating_duration_since(written)
        );
        stream.write_all(b"request").await.unwrap();
        let mut echoed = [0u8; 7];
        server.read_exact(&mut echoed).await.unwrap();
        assert_eq!(&echoed, b"request");
    }
}
