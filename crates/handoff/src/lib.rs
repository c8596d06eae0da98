//! A TCP connection inside a sandbox box, handed by berth-init to the host.
//!
//! A sandbox shares the host's kernel, so a connection berth-init has accepted (a box's
//! outbound connection, for the egress gateway) or made (to a box's port, for the ports
//! proxy) need not be copied through berth-init byte by byte: berth-init passes the socket
//! itself over a Unix socket (`SCM_RIGHTS`, with the one byte [`MARKER`]) and closes its own
//! descriptor, and the host reads and writes the socket directly. One hop, two copies and
//! a box-side thread's worth of CPU per byte fewer. A VM has its own kernel: its streams
//! still cross vsock or the serial channel and are copied.
//!
//! Trust. The socket comes from inside the box, so the host takes one only from the box's
//! init ([`Sender::BoxInit`], checked on the Unix socket's peer, not on anything the box
//! says). Any other process in the box, its root included, could keep a duplicate of what
//! it sends and then clear `O_NONBLOCK` (a flag every duplicate shares) or read the data the
//! host was woken for, and so block a host thread in `splice`. berth-init sends only
//! sockets it accepted or connected itself and closes them as they leave, so once received
//! the host holds the only descriptor. The socket is vetted as well ([`receive_first`]):
//! an IPv4 or IPv6 TCP stream, connected, made non-blocking by the host.

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// The byte a handoff carries (a stream of data never starts with it: a TLS record starts
/// with 0x16, a CONNECT head with `C`, a ports request with a digit).
pub const MARKER: u8 = 0;

/// At most this many descriptors are read from one message; a sender that attaches more
/// is refused (the extra ones are closed, never leaked).
const MAX_FDS: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    #[error("a socket was handed over by a process that is not the box's init (host pid {pid})")]
    NotFromBoxInit { pid: i32 },
    #[error("a handoff must carry exactly one socket with the marker byte; got {fds} descriptor(s) with byte {byte:#04x}")]
    Malformed { fds: usize, byte: u8 },
    #[error("the handed socket is not a connected TCP stream")]
    NotTcp,
    #[error("handoff: {0}")]
    Io(#[from] io::Error),
}

/// Whose handoffs the host takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// Only PID 1 of a PID namespace one level below the host's own: a sandbox's
    /// berth-init. A process the box starts in a PID namespace of its own is deeper.
    BoxInit,
    /// Only this very process (tests and benchmarks, where berth-init's code runs in-process).
    ThisProcess,
}

/// The first thing read from a stream that may begin with a handoff.
#[derive(Debug)]
pub enum First {
    /// A vetted TCP socket; the host now holds its only descriptor.
    Socket(TcpStream),
    /// No socket came: the first byte of a plain stream, to be read as part of it.
    Byte(u8),
    /// The peer closed before sending anything.
    Closed,
}

/// berth-init's side: sends `socket` with [`MARKER`] and closes it.
pub async fn send(unix: &UnixStream, socket: OwnedFd) -> io::Result<()> {
    unix.async_io(Interest::WRITABLE, || {
        send_fd(unix.as_raw_fd(), socket.as_raw_fd())
    })
    .await
}

/// The host's side: reads the first byte of `unix` and any socket handed with it. A
/// socket is taken only from `sender` and only as a lone socket with [`MARKER`].
pub async fn receive_first(unix: &UnixStream, sender: Sender) -> Result<First, HandoffError> {
    let Received {
        byte,
        fds,
        truncated,
    } = unix
        .async_io(Interest::READABLE, || recv_byte_and_fds(unix.as_raw_fd()))
        .await?;
    let Some(byte) = byte else {
        return Ok(First::Closed);
    };
    if fds.is_empty() && !truncated {
        return Ok(First::Byte(byte));
    }
    if fds.len() != 1 || truncated || byte != MARKER {
        return Err(HandoffError::Malformed {
            fds: fds.len(),
            byte,
        });
    }
    check_sender(unix, sender)?;
    let socket = fds.into_iter().next().ok_or(HandoffError::NotTcp)?;
    Ok(First::Socket(vet_tcp(socket)?))
}

fn check_sender(unix: &UnixStream, sender: Sender) -> Result<(), HandoffError> {
    let pid = peer_pid(unix.as_raw_fd())?;
    let trusted = match sender {
        Sender::ThisProcess => u32::try_from(pid).is_ok_and(|p| p == std::process::id()),
        Sender::BoxInit => is_child_namespace_init(pid)?,
    };
    if trusted {
        Ok(())
    } else {
        Err(HandoffError::NotFromBoxInit { pid })
    }
}

/// Whether `pid` (in this process's PID namespace) is PID 1 of a namespace exactly one
/// level below this process's own, read from the `NSpid` lines of `/proc`.
fn is_child_namespace_init(pid: i32) -> io::Result<bool> {
    let peer = ns_pids(&format!("/proc/{pid}/status"))?;
    Ok(peer.len() == own_depth()? + 1 && peer.last() == Some(&1))
}

/// How many PID namespaces this process is in: read once (it cannot change).
fn own_depth() -> io::Result<usize> {
    static DEPTH: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    if let Some(depth) = DEPTH.get() {
        return Ok(*depth);
    }
    let depth = ns_pids("/proc/self/status")?.len();
    Ok(*DEPTH.get_or_init(|| depth))
}

fn ns_pids(path: &str) -> io::Result<Vec<i64>> {
    let status = std::fs::read_to_string(path)?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "no NSpid in /proc (Linux ≥ 4.1)",
            )
        })?;
    line.split_whitespace()
        .map(|p| {
            p.parse()
                .map_err(|_| io::Error::other(format!("bad NSpid line in {path}")))
        })
        .collect()
}

fn peer_pid(fd: RawFd) -> io::Result<i32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.pid)
}

/// Accepts the descriptor only as a connected IPv4/IPv6 TCP stream, and makes it
/// non-blocking (the host's tokio runtime must never block on it).
fn vet_tcp(fd: OwnedFd) -> Result<TcpStream, HandoffError> {
    let raw = fd.as_raw_fd();
    let domain = sockopt(raw, libc::SO_DOMAIN).map_err(|_| HandoffError::NotTcp)?;
    let kind = sockopt(raw, libc::SO_TYPE).map_err(|_| HandoffError::NotTcp)?;
    let protocol = sockopt(raw, libc::SO_PROTOCOL).map_err(|_| HandoffError::NotTcp)?;
    if !matches!(domain, libc::AF_INET | libc::AF_INET6)
        || kind != libc::SOCK_STREAM
        || protocol != libc::IPPROTO_TCP
    {
        return Err(HandoffError::NotTcp);
    }
    let std = std::net::TcpStream::from(fd);
    std.peer_addr().map_err(|_| HandoffError::NotTcp)?;
    std.set_nonblocking(true)?;
    Ok(TcpStream::from_std(std)?)
}

fn sockopt(fd: RawFd, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            (&raw mut value).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

const fn cmsg_space(fds: usize) -> usize {
    // SAFETY: CMSG_SPACE only computes a size.
    unsafe { libc::CMSG_SPACE((fds * size_of::<RawFd>()) as u32) as usize }
}

/// A control buffer aligned for `cmsghdr`.
#[repr(C)]
struct ControlBuf {
    _align: [libc::cmsghdr; 0],
    bytes: [MaybeUninit<u8>; cmsg_space(MAX_FDS)],
}

impl ControlBuf {
    fn new() -> Self {
        ControlBuf {
            _align: [],
            bytes: [MaybeUninit::new(0); cmsg_space(MAX_FDS)],
        }
    }
}

/// A message of the one byte `iov` points at, with the first `control_len` bytes of
/// `control` as its control data. The pointers it holds are valid while both are.
fn message(iov: &mut libc::iovec, control: &mut ControlBuf, control_len: usize) -> libc::msghdr {
    // SAFETY: an all-zero msghdr is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.bytes.as_mut_ptr().cast();
    msg.msg_controllen = control_len as _;
    msg
}

fn send_fd(unix: RawFd, socket: RawFd) -> io::Result<()> {
    let mut byte = [MARKER];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = ControlBuf::new();
    let msg = message(&mut iov, &mut control, cmsg_space(1));
    // SAFETY: the control buffer holds CMSG_SPACE(one fd); CMSG_FIRSTHDR is non-null for it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
        libc::CMSG_DATA(cmsg)
            .cast::<RawFd>()
            .write_unaligned(socket);
    }
    // SAFETY: msg is fully initialised above.
    let sent = unsafe { libc::sendmsg(unix, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    match sent {
        1 => Ok(()),
        0 => Err(io::ErrorKind::WriteZero.into()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// One byte and what came with it.
struct Received {
    /// `None` at end of stream.
    byte: Option<u8>,
    /// Owned at once, so a refused one is closed on drop.
    fds: Vec<OwnedFd>,
    /// More descriptors came than fit: the kernel closed the rest.
    truncated: bool,
}

fn recv_byte_and_fds(unix: RawFd) -> io::Result<Received> {
    let mut byte = [0u8];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = ControlBuf::new();
    let mut msg = message(&mut iov, &mut control, cmsg_space(MAX_FDS));
    // SAFETY: msg points at live buffers of the sizes it names.
    let read =
        unsafe { libc::recvmsg(unix, &mut msg, libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT) };
    if read < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `msg_controllen` bytes of control data; the CMSG_* walk
    // stays within them, and each SCM_RIGHTS descriptor is now ours to own (and close).
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..len / size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(Received {
        byte: (read == 1).then_some(byte[0]),
        fds,
        truncated: msg.msg_flags & libc::MSG_CTRUNC != 0,
    })
}

#[cfg(test)]
mod tests;
