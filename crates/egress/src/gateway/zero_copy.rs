//! The passthrough splice for the gateway's real sockets (the box side: the box's own
//! `TcpStream` that berth-init handed over in a sandbox, or the `UnixStream` of a plain
//! stream, as a VM's are; the upstream `TcpStream`). How a direction moves bytes depends on the socket
//! it reads from, each the faster one measured (docs/benchmarks.md, "Egress"):
//!
//! - from TCP (download, and the upload of a handed-over socket): splice(2) TCP → pipe →
//!   socket. The pipe holds references to the TCP receive buffer's pages and the receiving
//!   socket takes them over, so the gateway copies nothing; it needs about a third less CPU
//!   than copying through a buffer.
//! - from a Unix socket (the upload of a stream): recv(2)/send(2) through a buffer. Splicing
//!   *from* a Unix socket measured worse: the gateway spent more CPU than copying while the
//!   whole chain moved about 30% fewer bytes per second (likely because splice copies each
//!   skb's linear head into a fresh page anyway, and the sender's pages stay pinned until the
//!   upstream has read them instead of being reused while still in cache).
//!
//! Both start small and grow only while a connection moves bulk data, so the many small API
//! calls hold little: a copy buffer from 16 KiB to 256 KiB; a splicing direction copies
//! through a 16 KiB buffer until a read fills it, then makes a pipe of the kernel's default
//! size (64 KiB), grown to 1 MiB while splices keep it half full. A direction falls back to the
//! buffer when the kernel refuses to splice (EINVAL) or no pipe can be made (EMFILE, ENFILE).
//!
//! The process must ignore SIGPIPE (the Rust runtime does, before `main`): splicing into a
//! socket whose peer has gone does not set MSG_NOSIGNAL, so otherwise an early close by the
//! box would kill the daemon instead of returning EPIPE.

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// The most a pipe holds. Its slots point at pages the data already sits in, so this bounds
/// bytes in flight, not a copy; the kernel allocates the slot array (40 bytes a page) when
/// the pipe grows. An unprivileged process over its pipe quota keeps the default size, which
/// still works.
const PIPE_MAX: usize = 1024 * 1024;
const PIPE_DEFAULT: usize = 64 * 1024;

/// First and largest size of a copy buffer. A Unix socket queues at most its sender's
/// SO_SNDBUF (208 KiB by default), so 256 KiB takes all of it in one call; larger buffers
/// measured no faster.
const BUF_START: usize = 16 * 1024;
const BUF_MAX: usize = 256 * 1024;

/// How one direction moves bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// socket → pipe → socket with splice(2).
    Splice,
    /// recv(2) into a buffer, send(2) out of it.
    Copy,
}

/// A socket tokio drives: readiness, and the fd for the syscalls.
pub(super) trait Socket: AsFd {
    /// How the bytes read from this kind of socket are moved on.
    const READ_MODE: Mode;
    fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<()>>;
    fn attempt<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

impl Socket for UnixStream {
    const READ_MODE: Mode = Mode::Copy;
    async fn ready(&self, interest: Interest) -> io::Result<()> {
        UnixStream::ready(self, interest).await.map(|_| ())
    }
    fn attempt<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        self.try_io(interest, f)
    }
}

impl Socket for TcpStream {
    const READ_MODE: Mode = Mode::Splice;
    async fn ready(&self, interest: Interest) -> io::Result<()> {
        TcpStream::ready(self, interest).await.map(|_| ())
    }
    fn attempt<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        self.try_io(interest, f)
    }
}

/// Replays `first_bytes` upstream, then moves bytes both ways until both directions have
/// closed (each EOF passed on as a write shutdown) or either fails, which ends both. `up`
/// counts bytes written to `upstream`, `down` bytes read from it, as they pass.
pub(super) async fn splice<B: Socket>(
    box_side: &B,
    upstream: &TcpStream,
    first_bytes: &[u8],
    up: &AtomicU64,
    down: &AtomicU64,
) -> io::Result<()> {
    write_all(upstream, first_bytes, up).await?;
    tokio::try_join!(
        pump(box_side, upstream, B::READ_MODE, None, Some(up)),
        pump(upstream, box_side, TcpStream::READ_MODE, Some(down), None),
    )?;
    Ok(())
}

async fn write_all<S: Socket>(to: &S, mut bytes: &[u8], counted: &AtomicU64) -> io::Result<()> {
    while !bytes.is_empty() {
        let n = retry(to, Interest::WRITABLE, || send(to.as_fd(), bytes)).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        counted.fetch_add(n as u64, Ordering::Relaxed);
        bytes = &bytes[n..];
    }
    Ok(())
}

fn add(counter: Option<&AtomicU64>, n: usize) {
    if let Some(c) = counter {
        c.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// One direction, `from` → `to`, until EOF (then `to` is shut down for writing) or an error.
/// `read` counts bytes taken from `from`, `written` bytes put into `to`. In `Mode::Splice`
/// the direction starts by copying and switches to a pipe at the first read that fills the
/// buffer: a connection that never moves bulk data this way never makes a pipe (pipe2, two
/// fds and their close, which measured ~10 µs on the path of every handshake).
pub(super) async fn pump<F: Socket, T: Socket>(
    from: &F,
    to: &T,
    mode: Mode,
    read: Option<&AtomicU64>,
    written: Option<&AtomicU64>,
) -> io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(BUF_START);
    if mode == Mode::Splice {
        if let Copied::Eof =
            copy_through(from, to, &mut buf, Some(BUF_START), read, written).await?
        {
            return shutdown_write(to);
        }
        match Pipe::new() {
            Ok(mut pipe) => {
                drop(std::mem::take(&mut buf));
                match splice_through(from, to, &mut pipe, read, written).await? {
                    Spliced::Done => return shutdown_write(to),
                    Spliced::Unsupported => buf = Vec::with_capacity(BUF_START),
                }
            }
            Err(e) => tracing::debug!(error = %e, "egress: no pipe to splice through, copying"),
        }
    }
    copy_through(from, to, &mut buf, None, read, written).await?;
    shutdown_write(to)
}

enum Copied {
    Eof,
    /// A read filled `upgrade_at` bytes (and was passed on): bulk data is queued.
    Bulk,
}

/// Copies through `buf` until EOF, or until a read fills `upgrade_at` bytes. Without
/// `upgrade_at` the buffer grows instead, doubling at each full read up to `BUF_MAX`.
async fn copy_through<F: Socket, T: Socket>(
    from: &F,
    to: &T,
    buf: &mut Vec<u8>,
    upgrade_at: Option<usize>,
    read: Option<&AtomicU64>,
    written: Option<&AtomicU64>,
) -> io::Result<Copied> {
    loop {
        // Not zeroed: recv(2) writes before anything reads it.
        let n = retry(from, Interest::READABLE, || recv_into(from.as_fd(), buf)).await?;
        if n == 0 {
            return Ok(Copied::Eof);
        }
        add(read, n);
        let mut at = 0;
        while at < n {
            let m = retry(to, Interest::WRITABLE, || send(to.as_fd(), &buf[at..])).await?;
            if m == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            add(written, m);
            at += m;
        }
        if n < buf.capacity() {
            continue;
        }
        if upgrade_at.is_some_and(|at| n >= at) {
            return Ok(Copied::Bulk);
        }
        if n < BUF_MAX {
            // A full read means bulk data is queued behind it: take more per call.
            *buf = Vec::with_capacity((2 * n).min(BUF_MAX));
        }
    }
}

enum Spliced {
    /// EOF from `from`, everything passed on.
    Done,
    /// The kernel cannot splice these sockets; nothing has been moved.
    Unsupported,
}

async fn splice_through<F: Socket, T: Socket>(
    from: &F,
    to: &T,
    pipe: &mut Pipe,
    read: Option<&AtomicU64>,
    written: Option<&AtomicU64>,
) -> io::Result<Spliced> {
    let mut first = true;
    loop {
        // Only an empty pipe is filled, so EAGAIN can only mean "socket empty": a full pipe
        // gives EAGAIN too, and would clear the socket's readiness wrongly.
        let filled = retry(from, Interest::READABLE, || {
            splice_fd(from.as_fd(), pipe.write.as_fd(), pipe.bytes)
        })
        .await;
        let n = match filled {
            Err(e) if first && e.raw_os_error() == Some(libc::EINVAL) => {
                return Ok(Spliced::Unsupported)
            }
            res => res?,
        };
        first = false;
        if n == 0 {
            return Ok(Spliced::Done);
        }
        add(read, n);
        let mut left = n;
        while left > 0 {
            // The pipe is not empty, so EAGAIN here means "socket full".
            let m = retry(to, Interest::WRITABLE, || {
                splice_fd(pipe.read.as_fd(), to.as_fd(), left)
            })
            .await?;
            if m == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            add(written, m);
            left -= m;
        }
        // Half full or more: bulk data is queued, let the next call take more. (Not "full":
        // a slot may hold less than a page, so a full pipe can hold less than its size.)
        if n >= pipe.bytes / 2 && pipe.bytes < PIPE_MAX {
            pipe.grow(PIPE_MAX);
        }
    }
}

/// Runs `f` when `socket` is ready for `interest`, again after each EAGAIN (which clears
/// tokio's cached readiness) or EINTR.
async fn retry<S: Socket, R>(
    socket: &S,
    interest: Interest,
    mut f: impl FnMut() -> io::Result<R>,
) -> io::Result<R> {
    loop {
        socket.ready(interest).await?;
        match socket.attempt(interest, &mut f) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            res => return res,
        }
    }
}

/// A non-blocking pipe, closed on drop.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Its capacity.
    bytes: usize,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are open fds that nothing else owns.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // The default size; a process over its pipe quota gets less, which only means
        // shorter splices (and no growth).
        let bytes = PIPE_DEFAULT;
        Ok(Pipe { read, write, bytes })
    }

    /// Best effort: on failure (over the pipe quota) the pipe keeps its size.
    fn grow(&mut self, to: usize) {
        let want = libc::c_int::try_from(to).unwrap_or(libc::c_int::MAX);
        // SAFETY: fcntl on an fd we own; F_SETPIPE_SZ takes an int and returns the new size.
        let got = unsafe { libc::fcntl(self.write.as_raw_fd(), libc::F_SETPIPE_SZ, want) };
        if let Ok(bytes) = usize::try_from(got) {
            self.bytes = bytes;
        }
    }
}

fn splice_fd(from: BorrowedFd<'_>, to: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    // SAFETY: both fds are open for the duration of the call; null offsets mean "the file
    // position", which pipes and sockets require.
    let n = unsafe {
        libc::splice(
            from.as_raw_fd(),
            std::ptr::null_mut(),
            to.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Receives into `buf`'s capacity, replacing its contents (`buf.len()` is what was received).
fn recv_into(fd: BorrowedFd<'_>, buf: &mut Vec<u8>) -> io::Result<usize> {
    buf.clear();
    // SAFETY: the pointer is valid for writes of `buf.capacity()` bytes; recv(2) only writes.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.capacity(), 0) };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    // SAFETY: recv(2) initialised the first `n` bytes, and `n <= capacity`.
    unsafe { buf.set_len(n) };
    Ok(n)
}

/// send(2) with MSG_NOSIGNAL: a gone peer is EPIPE, never SIGPIPE.
fn send(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for reads of `buf.len()` bytes.
    let n = unsafe {
        libc::send(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Passes an EOF on: the peer of `to` reads EOF, the other direction stays open.
fn shutdown_write<T: Socket>(to: &T) -> io::Result<()> {
    // SAFETY: shutdown(2) on an open socket fd.
    if unsafe { libc::shutdown(to.as_fd().as_raw_fd(), libc::SHUT_WR) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
