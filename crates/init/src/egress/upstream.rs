//! Where forwarded connections go: the host's egress gateway. In a sandbox it listens on
//! a Unix socket in the run directory the host bind-mounts; in a VM it is port
//! [`EGRESS_VSOCK_PORT`] of the host, over vsock (CID 2) or the serial channel's mux, and
//! the VMM (or the bridge) hands each stream to the host's per-box listener. The gateway tells boxes apart by that channel, never by
//! anything the box says.

use std::fmt;
use std::io;
use std::path::PathBuf;

use berth_protocol::guest::EGRESS_VSOCK_PORT;
use tokio::net::UnixStream;

use crate::mux::Link;
use crate::stream::Stream;
use crate::vsock::{VsockStream, HOST_CID};

#[derive(Debug, Clone)]
pub enum Upstream {
    /// A sandbox's `<run dir>/egress.sock`.
    Unix(PathBuf),
    /// A VM's host end.
    Vsock { cid: u32, port: u32 },
    /// A VM's host end over the serial channel: port [`EGRESS_VSOCK_PORT`] of the link.
    Mux(Link),
}

impl Upstream {
    /// The host's gateway as seen from a VM.
    pub fn vm_host() -> Self {
        Upstream::Vsock {
            cid: HOST_CID,
            port: EGRESS_VSOCK_PORT,
        }
    }

    /// Opens one stream. A vsock connect the host never answers ends with `ETIMEDOUT`
    /// after the kernel's connect timeout (2 s), so this does not hang; a serial channel
    /// open waits for the host end's answer (or its HELLO, while the link is down).
    pub async fn connect(&self) -> io::Result<Stream> {
        match self {
            Upstream::Unix(path) => UnixStream::connect(path).await.map(Stream::Unix),
            Upstream::Vsock { cid, port } => {
                VsockStream::connect(*cid, *port).await.map(Stream::Vsock)
            }
            Upstream::Mux(link) => link.open(EGRESS_VSOCK_PORT).await.map(Stream::Mux),
        }
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Upstream::Unix(path) => write!(f, "{}", path.display()),
            Upstream::Vsock { cid, port } => write!(f, "vsock {cid}:{port}"),
            Upstream::Mux(_) => write!(f, "serial channel port {EGRESS_VSOCK_PORT}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vm_gateway_is_the_host_on_port_2025() {
        assert!(matches!(
            Upstream::vm_host(),
            Upstream::Vsock { cid: 2, port: 2025 }
        ));
        assert_eq!(Upstream::vm_host().to_string(), "vsock 2:2025");
        assert_eq!(
            Upstream::Unix("/run/berth/egress.sock".into()).to_string(),
            "/run/berth/egress.sock"
        );
    }
}
