//! AF_VSOCK stream sockets on tokio, for a VM's two channels to the host: the agent
//! listens on port [`berth_protocol::guest::VSOCK_PORT`], and each egress stream connects
//! to the host (CID [`HOST_CID`]) on [`berth_protocol::guest::EGRESS_VSOCK_PORT`].
//!
//! tokio has no vsock type and `nix`'s needs a feature the workspace does not enable, so
//! this is `socket(2)` from `libc` made non-blocking and driven by [`AsyncFd`]: readiness
//! comes from epoll, reads and writes are plain `read(2)`/`write(2)`.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The host's context id (`VMADDR_CID_HOST`).
pub const HOST_CID: u32 = libc::VMADDR_CID_HOST;
/// Any local context id, for `bind` (`VMADDR_CID_ANY`).
pub const ANY_CID: u32 = libc::VMADDR_CID_ANY;
/// Pending connections the kernel queues before `accept`.
const BACKLOG: libc::c_int = 128;

fn sockaddr(cid: u32, port: u32) -> libc::sockaddr_vm {
    // SAFETY: sockaddr_vm is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_vm = unsafe { std::mem::zeroed() };
    addr.svm_family = libc::AF_VSOCK as libc::sa_family_t;
    addr.svm_cid = cid;
    addr.svm_port = port;
    addr
}

fn new_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the result is checked before it is owned.
    let fd = unsafe {
        libc::socket(
            libc::AF_VSOCK,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Hands a socket to tokio's reactor.
fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: `OwnedFd` keeps the descriptor open and unchanged for as long as the
    // `AsyncFd` owns it, which is what registration requires.
    Ok(unsafe { AsyncFd::register(fd) }?)
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A listening vsock socket.
#[derive(Debug)]
pub struct VsockListener {
    fd: AsyncFd<OwnedFd>,
}

impl VsockListener {
    /// Binds `(cid, port)` (usually [`ANY_CID`]) and listens. Needs a tokio runtime.
    pub fn bind(cid: u32, port: u32) -> io::Result<Self> {
        let fd = new_socket()?;
        let addr = sockaddr(cid, port);
        // SAFETY: `addr` is a valid sockaddr_vm and the length is its size.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const addr).cast(),
                size_of::<libc::sockaddr_vm>() as libc::socklen_t,
            )
        })?;
        // SAFETY: plain system call on a descriptor we own.
        check(unsafe { libc::listen(fd.as_raw_fd(), BACKLOG) })?;
        Ok(VsockListener { fd: register(fd)? })
    }

    /// The bound port (differs from the one asked for when that was `VMADDR_PORT_ANY`).
    #[cfg(test)]
    pub fn local_port(&self) -> io::Result<u32> {
        let mut addr = sockaddr(0, 0);
        let mut len = size_of::<libc::sockaddr_vm>() as libc::socklen_t;
        // SAFETY: `addr` and `len` describe a writable sockaddr_vm.
        check(unsafe {
            libc::getsockname(self.fd.as_raw_fd(), (&raw mut addr).cast(), &raw mut len)
        })?;
        Ok(addr.svm_port)
    }

    pub async fn accept(&self) -> io::Result<VsockStream> {
        loop {
            let mut guard = self.fd.readable().await?;
            let accepted = guard.try_io(|fd| {
                // SAFETY: the peer address is not asked for (null pointers are allowed).
                let new = unsafe {
                    libc::accept4(
                        fd.as_raw_fd(),
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                    )
                };
                if new < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    // SAFETY: `new` is a fresh descriptor nobody else owns.
                    Ok(unsafe { OwnedFd::from_raw_fd(new) })
                }
            });
            match accepted {
                Ok(fd) => return VsockStream::new(fd?),
                Err(_would_block) => continue,
            }
        }
    }
}

/// A connected vsock stream.
#[derive(Debug)]
pub struct VsockStream {
    fd: AsyncFd<OwnedFd>,
}

impl VsockStream {
    fn new(fd: OwnedFd) -> io::Result<Self> {
        Ok(VsockStream { fd: register(fd)? })
    }

    /// Connects to `(cid, port)`, e.g. ([`HOST_CID`], the egress port).
    pub async fn connect(cid: u32, port: u32) -> io::Result<Self> {
        let fd = new_socket()?;
        let addr = sockaddr(cid, port);
        // SAFETY: `addr` is a valid sockaddr_vm and the length is its size.
        let ret = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&raw const addr).cast(),
                size_of::<libc::sockaddr_vm>() as libc::socklen_t,
            )
        };
        if ret < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINPROGRESS) {
                return Err(err);
            }
        }
        let stream = VsockStream::new(fd)?;
        if ret < 0 {
            // Non-blocking connect: writable once it is settled; SO_ERROR says how.
            let _ready = stream.fd.writable().await?;
            let err = so_error(stream.fd.as_raw_fd())?;
            if err != 0 {
                return Err(io::Error::from_raw_os_error(err));
            }
        }
        Ok(stream)
    }
}

fn so_error(fd: RawFd) -> io::Result<libc::c_int> {
    let mut err: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `err` and `len` describe a writable c_int.
    check(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&raw mut err).cast(),
            &raw mut len,
        )
    })?;
    Ok(err)
}

impl AsyncRead for VsockStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let read = guard.try_io(|fd| {
                // SAFETY: `unfilled` is a writable buffer of the given length.
                let n = unsafe {
                    libc::read(fd.as_raw_fd(), unfilled.as_mut_ptr().cast(), unfilled.len())
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match read {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(err)) => return Poll::Ready(Err(err)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for VsockStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            let written = guard.try_io(|fd| {
                // SAFETY: `buf` is a readable buffer of the given length. MSG_NOSIGNAL: a
                // closed peer is an EPIPE error, not a SIGPIPE for PID 1.
                let n = unsafe {
                    libc::send(
                        fd.as_raw_fd(),
                        buf.as_ptr().cast(),
                        buf.len(),
                        libc::MSG_NOSIGNAL,
                    )
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match written {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // SAFETY: plain system call on a descriptor we own.
        let ret = unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_WR) };
        match check(ret) {
            // The peer is already gone: nothing left to shut.
            Err(err) if err.raw_os_error() == Some(libc::ENOTCONN) => Poll::Ready(Ok(())),
            other => Poll::Ready(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// `VMADDR_CID_LOCAL`: this machine, through the `vsock_loopback` transport.
    const LOCAL_CID: u32 = 1;

    /// A listener on the loopback transport, or `None` (with the reason printed) where the
    /// kernel has no vsock or no loopback transport, as in most containers.
    fn loopback_listener() -> Option<VsockListener> {
        match VsockListener::bind(ANY_CID, libc::VMADDR_PORT_ANY) {
            Ok(l) => Some(l),
            Err(err) => {
                eprintln!("skipped: no AF_VSOCK here ({err})");
                None
            }
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_stream_carries_bytes_both_ways_and_half_closes() {
        let Some(listener) = loopback_listener() else {
            return;
        };
        let port = listener.local_port().unwrap();
        let mut client = match VsockStream::connect(LOCAL_CID, port).await {
            Ok(c) => c,
            Err(err) => {
                eprintln!("skipped: no vsock loopback transport ({err})");
                return;
            }
        };
        let mut server = listener.accept().await.unwrap();
        client.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        server.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        server.write_all(&vec![9u8; 300_000]).await.unwrap();
        server.shutdown().await.unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, vec![9u8; 300_000]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn connecting_to_nobody_fails_with_an_error_not_a_hang() {
        if loopback_listener().is_none() {
            return;
        }
        // Port 1 on the loopback CID: refused, or the transport is missing; either way an
        // error comes back.
        let result = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            VsockStream::connect(LOCAL_CID, 1),
        )
        .await
        .expect("connect hung");
        assert!(result.is_err());
    }
}
