//! The guest channel's endpoint. In a sandbox the host bind-mounts a run directory
//! (`/run/berth`, root-only) and writes the boot token into it before start (a VM's
//! `disks` phase writes the same file from the config disk). At boot the agent reads the
//! token, deletes the file (the token then lives only in this non-dumpable process), and
//! listens: in a sandbox on `agent.sock` (0600, replacing any stale socket), in a VM on
//! port 2024 of the VM's channel to the host ([`VmChannel`]: the serial channel's mux
//! where QEMU gives the VM its port, else vsock).

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use berth_protocol::guest::{AGENT_SOCKET, TOKEN_FILE, VSOCK_PORT};
use tokio::net::UnixListener;

use crate::egress::Upstream;
use crate::listener::ChannelListener;
use crate::mux::{Link, Role};
use crate::vm::serial_port::{self, SerialPort, SerialPortError};
use crate::vsock::{VsockListener, ANY_CID};

#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("serve phase: cannot read the boot token {path}")]
    ReadToken {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("serve phase: the boot token {path} is empty")]
    EmptyToken { path: PathBuf },
    #[error("serve phase: cannot delete the boot token {path}")]
    DeleteToken {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("serve phase: cannot listen on {path}")]
    Listen {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("serve phase: cannot listen on vsock port {port}")]
    ListenVsock {
        port: u32,
        #[source]
        source: io::Error,
    },
    #[error("serve phase: cannot listen on serial channel port {port}")]
    ListenSerial {
        port: u32,
        #[source]
        source: io::Error,
    },
    #[error("egress phase: cannot open the serial channel")]
    SerialPort(#[from] SerialPortError),
}

/// A VM's channel to the host, chosen once at boot for both directions (the agent's
/// listener and the egress upstream): the serial channel when the VM has its port
/// (QEMU), else vsock (Firecracker).
#[derive(Debug)]
pub enum VmChannel {
    Serial(Link),
    Vsock,
}

impl VmChannel {
    /// Finds the serial channel's port (waiting a little if the VM has a virtio console)
    /// and starts the guest end of the mux on it. Needs a tokio runtime.
    pub fn open() -> Result<VmChannel, ChannelError> {
        let found =
            serial_port::find(Path::new("/sys"), Path::new("/dev"), serial_port::PORT_WAIT)?;
        let Some(path) = found else {
            return Ok(VmChannel::Vsock);
        };
        let (link, task) = Link::start(SerialPort::open(&path)?, Role::Guest);
        tokio::spawn(async move {
            // The guest end goes on through bad input; only a failing port ends it.
            if let Ok(Err(err)) = task.await {
                let cause = std::error::Error::source(&err)
                    .map(|c| format!(": {c}"))
                    .unwrap_or_default();
                eprintln!("berth-init: the serial channel ended: {err}{cause}");
            }
        });
        Ok(VmChannel::Serial(link))
    }

    /// Where the egress phase forwards to.
    pub fn upstream(&self) -> Upstream {
        match self {
            VmChannel::Serial(link) => Upstream::Mux(link.clone()),
            VmChannel::Vsock => Upstream::vm_host(),
        }
    }

    /// The agent's listener, on port [`VSOCK_PORT`].
    pub fn listen(&self) -> Result<ChannelListener, ChannelError> {
        match self {
            VmChannel::Serial(link) => {
                link.listen(VSOCK_PORT)
                    .map(ChannelListener::Mux)
                    .map_err(|source| ChannelError::ListenSerial {
                        port: VSOCK_PORT,
                        source,
                    })
            }
            VmChannel::Vsock => listen_vsock().map(ChannelListener::Vsock),
        }
    }

    /// The console line the host waits for before it connects (it matches
    /// [`berth_protocol::vm::READY_MARK`]).
    pub fn ready_line(&self) -> String {
        let via = match self {
            VmChannel::Serial(_) => " (serial channel)",
            VmChannel::Vsock => "",
        };
        format!("{} port {VSOCK_PORT}{via}", berth_protocol::vm::READY_MARK)
    }
}

/// The boot token, kept only in memory. Compared in constant time.
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

impl Token {
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        Token(bytes)
    }

    /// Whether `candidate` is the token. Time depends only on the lengths.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        if candidate.len() != self.0.len() {
            return false;
        }
        let diff = self
            .0
            .iter()
            .zip(candidate)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

/// Reads and deletes `<run_dir>/token`.
pub fn take_token(run_dir: &Path) -> Result<Token, ChannelError> {
    let path = run_dir.join(TOKEN_FILE);
    let raw = std::fs::read(&path).map_err(|source| ChannelError::ReadToken {
        path: path.clone(),
        source,
    })?;
    std::fs::remove_file(&path).map_err(|source| ChannelError::DeleteToken {
        path: path.clone(),
        source,
    })?;
    let token = raw.trim_ascii().to_vec();
    if token.is_empty() {
        return Err(ChannelError::EmptyToken { path });
    }
    Ok(Token(token))
}

/// Listens on `<run_dir>/agent.sock`, replacing a stale socket, mode 0600. The socket is
/// bound under a temporary name and renamed into place, so the path appears only once it
/// is listening with its final mode (no connection is ever refused or let in early).
pub fn listen(run_dir: &Path) -> Result<UnixListener, ChannelError> {
    let path = run_dir.join(AGENT_SOCKET);
    let tmp = run_dir.join(format!(".{AGENT_SOCKET}.tmp"));
    let err = |source| ChannelError::Listen {
        path: path.clone(),
        source,
    };
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    let listener = UnixListener::bind(&tmp).map_err(err)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    std::fs::rename(&tmp, &path).map_err(err)?;
    Ok(listener)
}

/// Listens on vsock port [`VSOCK_PORT`] (any local CID): a VM's guest channel. The host
/// reaches it through the VMM's hybrid vsock socket (`CONNECT 2024`). Only the host can
/// connect: the guest has no loopback vsock transport.
pub fn listen_vsock() -> Result<VsockListener, ChannelError> {
    VsockListener::bind(ANY_CID, VSOCK_PORT).map_err(|source| ChannelError::ListenVsock {
        port: VSOCK_PORT,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_read_once_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(TOKEN_FILE), "abc\n").unwrap();
        let token = take_token(dir.path()).unwrap();
        assert!(token.matches(b"abc"));
        assert!(!token.matches(b"abd"));
        assert!(!token.matches(b"ab"));
        assert!(!dir.path().join(TOKEN_FILE).exists());
        assert!(matches!(
            take_token(dir.path()),
            Err(ChannelError::ReadToken { .. })
        ));
        std::fs::write(dir.path().join(TOKEN_FILE), "\n").unwrap();
        assert!(matches!(
            take_token(dir.path()),
            Err(ChannelError::EmptyToken { .. })
        ));
    }

    /// The serial channel as `main` uses it: the agent's listener on port 2024 and the
    /// egress upstream to port 2025, through the same types as the other channels.
    #[tokio::test(flavor = "current_thread")]
    async fn a_serial_channel_serves_the_agent_and_reaches_egress() {
        use crate::listener::Listener;
        use berth_protocol::guest::EGRESS_VSOCK_PORT;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let (g, h) = tokio::io::duplex(64 * 1024);
        let (guest, _gt) = Link::start(g, Role::Guest);
        let (host, _ht) = Link::start(h, Role::Host);
        let channel = VmChannel::Serial(guest);
        assert_eq!(
            channel.ready_line(),
            format!(
                "{} port 2024 (serial channel)",
                berth_protocol::vm::READY_MARK
            )
        );
        let listener = channel.listen().unwrap();
        let gateway = host.listen(EGRESS_VSOCK_PORT).unwrap();
        let upstream = channel.upstream();
        assert_eq!(upstream.to_string(), "serial channel port 2025");
        let talked = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            let mut from_host = host.open(VSOCK_PORT).await.unwrap();
            let mut agent_side = listener.accept_conn().await.unwrap();
            from_host.write_all(b"GET").await.unwrap();
            let mut buf = [0u8; 3];
            agent_side.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"GET");
            let mut out = upstream.connect().await.unwrap();
            let mut at_gateway = gateway.accept().await.unwrap();
            out.write_all(b"\x16\x03\x01").await.unwrap();
            at_gateway.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"\x16\x03\x01");
        });
        talked.await.expect("no progress within 30 s");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_stale_socket_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(AGENT_SOCKET), "").unwrap();
        let _listener = listen(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(AGENT_SOCKET))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
