//! The guest end of the serial channel: the virtio-serial port QEMU names
//! [`CHANNEL_PORT_NAME`], as a byte stream for the mux ([`crate::mux`]).
//!
//! Finding it: there is no udev in the guest, so no `/dev/virtio-ports/<name>` symlink
//! (used if present); the port is the `/sys/class/virtio-ports/vportNpM` whose `name` says
//! so, and its node `/dev/vportNpM` comes from devtmpfs (made here from `dev` if missing).
//! The driver adds ports asynchronously after its probe, so when the VM has a
//! virtio-console device the port is waited for (bounded); a VM without one (Firecracker)
//! has none and uses vsock.
//!
//! Reading and writing: the port is opened non-blocking and driven by tokio's [`AsyncFd`].
//! While no host end is connected (before the bridge, or between a snapshot and its
//! restore) a read returns 0 and a write `EAGAIN`, and poll reports a hang-up, which tokio
//! keeps as "closed" for the registration's life; so on those a direction drops its
//! registration and registers again after [`RECONNECT_POLL`]. One descriptor per direction
//! (the second a `dup`), so each re-registers alone.

use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use berth_protocol::vm::CHANNEL_PORT_NAME;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use super::block::parse_devno;

/// How long a VM with a virtio-console device waits for the channel's port to appear.
pub const PORT_WAIT: Duration = Duration::from_secs(5);
/// How often sysfs is looked at while waiting.
const POLL: Duration = Duration::from_millis(5);
/// How often a direction looks again while the host end is not connected.
const RECONNECT_POLL: Duration = Duration::from_millis(5);
/// The virtio device id of a console (`/sys/bus/virtio/devices/*/device`).
const VIRTIO_ID_CONSOLE: &str = "0x0003";

#[derive(Debug, thiserror::Error)]
pub enum SerialPortError {
    #[error("cannot list {path}")]
    Scan {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot make the device node {path}")]
    Node {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot open the serial channel's port {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The channel's port under `dev` (`/dev`), looking in `sys` (`/sys`); `None` when the VM
/// has no virtio console, or its port did not appear within `wait`.
pub fn find(sys: &Path, dev: &Path, wait: Duration) -> Result<Option<PathBuf>, SerialPortError> {
    let start = Instant::now();
    loop {
        if let Some(node) = scan(sys, dev)? {
            return Ok(Some(node));
        }
        if !has_console_device(sys) || start.elapsed() >= wait {
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}

fn scan(sys: &Path, dev: &Path) -> Result<Option<PathBuf>, SerialPortError> {
    let linked = dev.join("virtio-ports").join(CHANNEL_PORT_NAME);
    if linked.exists() {
        return Ok(Some(linked));
    }
    let class = sys.join("class/virtio-ports");
    let entries = match std::fs::read_dir(&class) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(SerialPortError::Scan {
                path: class,
                source,
            })
        }
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let named = std::fs::read_to_string(dir.join("name")).unwrap_or_default();
        if named.trim() != CHANNEL_PORT_NAME {
            continue;
        }
        let node = dev.join(entry.file_name());
        let devno = std::fs::read_to_string(dir.join("dev"))
            .ok()
            .and_then(|text| parse_devno(&text));
        return match devno {
            Some(devno) => ensure_node(&node, devno).map(Some),
            // Named but without its numbers yet: look again.
            None => Ok(None),
        };
    }
    Ok(None)
}

/// devtmpfs makes the node; if it is not there it is made here, root-only.
fn ensure_node(node: &Path, (major, minor): (u32, u32)) -> Result<PathBuf, SerialPortError> {
    let err = |source| SerialPortError::Node {
        path: node.to_owned(),
        source,
    };
    match std::fs::symlink_metadata(node) {
        // A regular file only ever appears in tests' fake trees.
        Ok(meta) if meta.file_type().is_char_device() || meta.file_type().is_file() => {
            return Ok(node.to_owned())
        }
        Ok(_) => {
            return Err(err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "it exists but is not a character device",
            )))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    nix::sys::stat::mknod(
        node,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
        nix::sys::stat::makedev(u64::from(major), u64::from(minor)),
    )
    .map_err(|e| err(e.into()))?;
    Ok(node.to_owned())
}

fn has_console_device(sys: &Path) -> bool {
    let Ok(devices) = std::fs::read_dir(sys.join("bus/virtio/devices")) else {
        return false;
    };
    devices.flatten().any(|d| {
        std::fs::read_to_string(d.path().join("device"))
            .is_ok_and(|id| id.trim() == VIRTIO_ID_CONSOLE)
    })
}

/// The open port: an `AsyncRead + AsyncWrite` that waits out a host end that is not
/// connected instead of ending.
#[derive(Debug)]
pub struct SerialPort {
    read: Half,
    write: Half,
}

impl SerialPort {
    /// Opens `path` read-write, non-blocking. Needs a tokio runtime.
    pub fn open(path: &Path) -> Result<SerialPort, SerialPortError> {
        let err = |source| SerialPortError::Open {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(err)?;
        let read = OwnedFd::from(file);
        let write = read.try_clone().map_err(err)?;
        Ok(SerialPort {
            read: Half::new(read).map_err(err)?,
            write: Half::new(write).map_err(err)?,
        })
    }
}

/// One direction's descriptor: registered with tokio, or waiting to be again.
#[derive(Debug)]
enum Half {
    Registered(AsyncFd<OwnedFd>),
    Waiting(Option<OwnedFd>, Pin<Box<Sleep>>),
}

impl Half {
    fn new(fd: OwnedFd) -> io::Result<Half> {
        // SAFETY: `OwnedFd` keeps the descriptor open and unchanged for as long as the
        // `AsyncFd` owns it, which is what registration requires.
        Ok(Half::Registered(unsafe { AsyncFd::register(fd) }?))
    }

    /// Runs `op` once the descriptor is ready; `Ok(None)` from `op` means the host end is
    /// not connected.
    fn poll_op<T>(
        &mut self,
        cx: &mut Context<'_>,
        writing: bool,
        mut op: impl FnMut(&OwnedFd) -> io::Result<Option<T>>,
    ) -> Poll<io::Result<T>> {
        loop {
            let afd = match self {
                Half::Registered(afd) => afd,
                Half::Waiting(fd, sleep) => {
                    ready!(sleep.as_mut().poll(cx));
                    let Some(fd) = fd.take() else {
                        return Poll::Ready(Err(io::ErrorKind::NotConnected.into()));
                    };
                    *self = Half::new(fd)?;
                    continue;
                }
            };
            let mut guard = ready!(if writing {
                afd.poll_write_ready(cx)
            } else {
                afd.poll_read_ready(cx)
            })?;
            let hung_up = guard.ready().is_read_closed() || guard.ready().is_write_closed();
            match op(afd.get_ref()) {
                Ok(Some(n)) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && !hung_up => {
                    guard.clear_ready();
                }
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Poll::Ready(Err(e)),
                // Read 0, or nothing to do with a hang-up seen: no host end.
                Ok(None) | Err(_) => {
                    drop(guard);
                    self.wait_for_host();
                }
            }
        }
    }

    /// Drops the registration (and the hang-up tokio keeps with it) until a timer fires.
    fn wait_for_host(&mut self) {
        let sleep = Box::pin(tokio::time::sleep(RECONNECT_POLL));
        if let Half::Registered(afd) = std::mem::replace(self, Half::Waiting(None, sleep)) {
            if let Half::Waiting(fd, _) = self {
                *fd = Some(afd.into_inner());
            }
        }
    }
}

fn syscall_len(ret: isize) -> io::Result<usize> {
    usize::try_from(ret).map_err(|_| io::Error::last_os_error())
}

impl AsyncRead for SerialPort {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let unfilled = buf.initialize_unfilled();
        let n = ready!(self.get_mut().read.poll_op(cx, false, |fd| {
            // SAFETY: `unfilled` is a writable buffer of the given length.
            let ret =
                unsafe { libc::read(fd.as_raw_fd(), unfilled.as_mut_ptr().cast(), unfilled.len()) };
            syscall_len(ret).map(|n| (n > 0).then_some(n))
        }))?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for SerialPort {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        self.get_mut().write.poll_op(cx, true, |fd| {
            // SAFETY: `buf` is a readable buffer of the given length.
            let ret = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
            syscall_len(ret).map(Some)
        })
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // A port has no half-close; the link never ends its side.
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mux::{Link, Role};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn port_dir(sys: &Path, dev: &Path, entry: &str, name: &str) {
        let dir = sys.join("class/virtio-ports").join(entry);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("name"), format!("{name}\n")).unwrap();
        std::fs::write(dir.join("dev"), "248:1\n").unwrap();
        std::fs::write(dev.join(entry), "").unwrap();
    }

    fn console_device(sys: &Path) {
        let dir = sys.join("bus/virtio/devices/virtio3");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("device"), "0x0003\n").unwrap();
    }

    #[test]
    fn the_port_is_found_by_its_sysfs_name_without_udev() {
        let sys = tempfile::tempdir().unwrap();
        let dev = tempfile::tempdir().unwrap();
        // No virtio console at all (Firecracker): no wait, no port.
        let started = Instant::now();
        assert!(find(sys.path(), dev.path(), Duration::from_secs(60))
            .unwrap()
            .is_none());
        assert!(started.elapsed() < Duration::from_secs(10));
        console_device(sys.path());
        port_dir(sys.path(), dev.path(), "vport0p0", "org.qemu.guest_agent.0");
        assert!(find(sys.path(), dev.path(), Duration::ZERO)
            .unwrap()
            .is_none());
        port_dir(sys.path(), dev.path(), "vport0p1", CHANNEL_PORT_NAME);
        assert_eq!(
            find(sys.path(), dev.path(), Duration::ZERO).unwrap(),
            Some(dev.path().join("vport0p1"))
        );
        // udev's symlink wins where there is one.
        std::fs::create_dir(dev.path().join("virtio-ports")).unwrap();
        std::fs::write(dev.path().join("virtio-ports").join(CHANNEL_PORT_NAME), "").unwrap();
        assert_eq!(
            find(sys.path(), dev.path(), Duration::ZERO).unwrap(),
            Some(dev.path().join("virtio-ports").join(CHANNEL_PORT_NAME))
        );
    }

    #[test]
    fn a_missing_node_is_made_as_a_character_device() {
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("vport0p1");
        match ensure_node(&node, (1, 3)) {
            Ok(path) => {
                let meta = std::fs::metadata(&path).unwrap();
                assert!(meta.file_type().is_char_device());
            }
            // Not root, or no mknod in this container: say so rather than pass.
            Err(err) => eprintln!("skipped: cannot mknod here ({err})"),
        }
        std::fs::create_dir(dir.path().join("vport0p2")).unwrap();
        assert!(ensure_node(&dir.path().join("vport0p2"), (1, 3)).is_err());
    }

    /// A guest link over the port code, on a Unix socket standing in for the port (a
    /// socket's EOF reads as "no host end" here, so the far end stays open).
    #[tokio::test(flavor = "current_thread")]
    async fn a_guest_link_runs_over_the_port_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("port.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let host_end = std::os::unix::net::UnixStream::connect(&path).unwrap();
        let (guest_end, _) = listener.accept().unwrap();
        let fd = OwnedFd::from(guest_end);
        fd_nonblocking(&fd);
        let port = SerialPort {
            write: Half::new(fd.try_clone().unwrap()).unwrap(),
            read: Half::new(fd).unwrap(),
        };
        host_end.set_nonblocking(true).unwrap();
        let host_end = tokio::net::UnixStream::from_std(host_end).unwrap();
        let (guest, _gt) = Link::start(port, Role::Guest);
        let (host, _ht) = Link::start(host_end, Role::Host);
        let listener = guest.listen(2024).unwrap();
        let moved = tokio::time::timeout(Duration::from_secs(30), async {
            let mut client = host.open(2024).await.unwrap();
            let mut server = listener.accept().await.unwrap();
            let big = vec![0x5a; 1 << 20];
            let (w, r) = tokio::join!(client.write_all(&big), async {
                let mut got = vec![0u8; big.len()];
                server.read_exact(&mut got).await.map(|_| got)
            });
            w.unwrap();
            r.unwrap() == big
        });
        assert!(moved.await.expect("no progress within 30 s"));
    }

    fn fd_nonblocking(fd: &OwnedFd) {
        // SAFETY: plain fcntl calls on a descriptor we own.
        unsafe {
            let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            assert!(libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) >= 0);
        }
    }
}
