//! The bridge's life: both sockets bound, then QEMU's one connection served until it ends.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::UnixListener;

use super::{connect_line, guest_opens, host_clients, sockets, BridgeError, Options};
use crate::mux::{Link, MuxError, Role};

/// Both sockets, bound and listening; nothing accepted yet.
#[derive(Debug)]
pub struct Bridge {
    serial_path: PathBuf,
    serial: UnixListener,
    uds_path: PathBuf,
    clients: UnixListener,
    /// How long a client may take to send its `CONNECT` line.
    pub(super) line_timeout: Duration,
}

impl Bridge {
    /// Creates both sockets (0600, replacing stale ones).
    pub fn bind(options: &Options) -> Result<Bridge, BridgeError> {
        let listen = |path: &Path| {
            sockets::listen_private(path).map_err(|source| BridgeError::Listen {
                path: path.to_owned(),
                source,
            })
        };
        Ok(Bridge {
            serial: listen(&options.serial)?,
            serial_path: options.serial.clone(),
            clients: listen(&options.uds_path)?,
            uds_path: options.uds_path.clone(),
            line_timeout: connect_line::LINE_TIMEOUT,
        })
    }

    /// Waits for QEMU, then bridges until its connection ends: `Ok` then, an error when the
    /// link broke. Every stream and client goes with it.
    pub async fn serve(self) -> Result<(), BridgeError> {
        let (qemu, _) = self
            .serial
            .accept()
            .await
            .map_err(|source| BridgeError::AcceptSerial {
                path: self.serial_path.clone(),
                source,
            })?;
        // One QEMU at a time: a second connection is refused rather than left waiting.
        drop(self.serial);
        let (link, driver) = Link::start(qemu, Role::Host);
        let guest = guest_opens::Forwarder::listen(&link, &self.uds_path)?;
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(guest.run());
        tasks.spawn(host_clients::serve(self.clients, link, self.line_timeout));
        // Dropping `tasks` on return aborts the loops and, with them, every connection.
        match driver.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) if qemu_went_away(&err) => Ok(()),
            Ok(Err(err)) => Err(BridgeError::Link(err)),
            Err(err) => Err(BridgeError::LinkTask(err)),
        }
    }
}

/// Whether the link ended because QEMU closed its end: a process that exits (or is killed)
/// with bytes of ours unread resets the connection rather than ending it.
fn qemu_went_away(err: &MuxError) -> bool {
    match err {
        MuxError::Read(e) | MuxError::Write(e) => matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ),
        MuxError::Violation(_) => false,
    }
}
