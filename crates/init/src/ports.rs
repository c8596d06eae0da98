//! The host's way into a program listening inside the box (`berth_protocol::ports`).
//!
//! - `GET /v1/ports/{port}` (upgrade): berth-init connects, answers `101`, and copies bytes
//!   both ways between the guest channel and the connection ([`splice`]). A VM's only way.
//! - `POST /v1/ports/{port}/handoff`: in a sandbox, where the channel is a Unix socket and
//!   the host shares this kernel, berth-init connects and hands the socket itself to the
//!   host ([`hand_over`], `berth_handoff`), keeping no copy: it relays nothing.
//!
//! Either connects before it answers, so "nothing listens" is an answer, not a stream that
//! closes at once.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;

use berth_protocol::guest::{EGRESS_PROXY_PORT, EGRESS_TLS_PORT};
use berth_protocol::ports::{PORT_HANDOFF, PORT_UPGRADE};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::error::ApiError;

/// Connects to `127.0.0.1:<port>` inside the box. berth-init's own egress listeners are
/// not a box's ports.
pub async fn connect(port: &str) -> Result<TcpStream, ApiError> {
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or(ApiError::BadQuery {
            name: "port",
            reason: "must be a TCP port between 1 and 65535",
        })?;
    if port == EGRESS_TLS_PORT || port == EGRESS_PROXY_PORT {
        return Err(ApiError::ReservedPort { port });
    }
    match TcpStream::connect(("127.0.0.1", port)).await {
        Ok(stream) => {
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Err(source) => Err(ApiError::PortClosed { port, source }),
    }
}

/// Bytes copied at a time each way. With tokio's default 8 KiB, a download through the
/// ports proxy ran at half the speed (benches/benches/ports.rs, same run: 0.12-0.13× the
/// host's direct speed, against 0.28-0.53× with these); two per connection stay small.
const SPLICE_BUF: usize = 64 * 1024;

/// Copies both ways until either side closes.
pub async fn splice(upgrade: OnUpgrade, mut stream: TcpStream) {
    if let Ok(upgraded) = upgrade.await {
        let mut upgraded = TokioIo::new(upgraded);
        let _ = tokio::io::copy_bidirectional_with_sizes(
            &mut upgraded,
            &mut stream,
            SPLICE_BUF,
            SPLICE_BUF,
        )
        .await;
    }
}

/// The guest-channel connection a request came on, when it can carry a descriptor to the
/// host: a sandbox's Unix socket (a descriptor of its own, so it stays valid for as long as
/// anything holds it). [`crate::server::serve`] puts it in each request's extensions.
#[derive(Debug, Clone)]
pub struct HandoffChannel(Arc<OwnedFd>);

impl HandoffChannel {
    /// A descriptor of its own for `socket`: it stays valid for as long as a request holds
    /// it, whatever becomes of the connection.
    pub fn of(socket: BorrowedFd<'_>) -> Option<HandoffChannel> {
        let own = socket.try_clone_to_owned().ok()?;
        Some(HandoffChannel(Arc::new(own)))
    }
}

/// The port of a handoff's path (`{port}/handoff` after `/v1/ports/`).
pub fn handoff_of(rest: &str) -> Option<&str> {
    rest.strip_suffix(PORT_HANDOFF)?.strip_suffix('/')
}

/// `POST /v1/ports/{port}/handoff`: connects like [`connect`] and sends the connected
/// socket over `channel`, closing berth-init's own descriptor as it leaves. Without a
/// channel that can carry it (a VM's) the host is told to use the upgrade, before anything
/// is dialled.
pub async fn hand_over(port: &str, channel: Option<&HandoffChannel>) -> Result<(), ApiError> {
    let channel = channel.ok_or(ApiError::NeedsUpgrade {
        protocol: PORT_UPGRADE,
    })?;
    let stream = connect(port).await?;
    let send = async {
        let unix = std::os::unix::net::UnixStream::from(channel.0.try_clone()?);
        unix.set_nonblocking(true)?;
        let unix = tokio::net::UnixStream::from_std(unix)?;
        let socket: OwnedFd = stream.into_std()?.into();
        berth_handoff::send(&unix, socket).await
    };
    send.await.map_err(ApiError::Handoff)
}
