//! The guest reaching host processes: a stream the guest opens to port P is connected to
//! the Unix socket `<uds-path>_P` (Firecracker's hybrid vsock convention; the
//! egress listener is `<run>/vsock.sock_2025`). The engine hands over streams per port
//! listened on, so the bridge serves [`EGRESS_VSOCK_PORT`], the one port a guest opens;
//! an open to any other port is refused (`ECONNREFUSED` in the guest). With no socket at
//! the path the stream is reset.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use berth_protocol::guest::EGRESS_VSOCK_PORT;
use tokio::net::UnixStream;
use tokio::task::JoinSet;

use super::splice::splice;
use super::BridgeError;
use crate::mux::{Link, MuxListener, MuxStream};

/// The guest's streams to one host port.
#[derive(Debug)]
pub struct Forwarder {
    listener: MuxListener,
    target: PathBuf,
}

impl Forwarder {
    /// Takes the guest's streams to [`EGRESS_VSOCK_PORT`], the one port a guest opens.
    pub fn listen(link: &Link, uds_path: &Path) -> Result<Forwarder, BridgeError> {
        let port = EGRESS_VSOCK_PORT;
        let listener = link
            .listen(port)
            .map_err(|source| BridgeError::GuestListen { port, source })?;
        Ok(Forwarder {
            listener,
            target: target(uds_path, port),
        })
    }

    /// Forwards streams until the link ends or the task is dropped (which drops them all).
    /// The engine bounds how many the guest has open.
    pub async fn run(self) {
        let mut streams = JoinSet::new();
        let mut refused = 0u64;
        loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(stream) => {
                        streams.spawn(forward(stream, self.target.clone()));
                    }
                    Err(_) => return, // the link ended
                },
                Some(done) = streams.join_next(), if !streams.is_empty() => {
                    if let Ok(Err(err)) = done {
                        refused += 1;
                        // The guest decides how often this happens: the log grows with
                        // the logarithm of it.
                        if refused.is_power_of_two() {
                            eprintln!(
                                "berth-init bridge: guest streams refused ({refused} so far): cannot connect to {}: {err}",
                                self.target.display()
                            );
                        }
                    }
                }
            }
        }
    }
}

/// `<uds_path>_<port>`.
pub fn target(uds_path: &Path, port: u32) -> PathBuf {
    let mut path = OsString::from(uds_path.as_os_str());
    path.push(format!("_{port}"));
    path.into()
}

/// Splices `stream` with a new connection to `target`; the connect's error when there is
/// none, after which dropping the stream resets it (the guest's open was accepted by its
/// engine already: the guest sees `ConnectionReset`).
async fn forward(mut stream: MuxStream, target: PathBuf) -> std::io::Result<()> {
    let mut host = UnixStream::connect(&target).await?;
    let _ = splice(&mut stream, &mut host).await;
    Ok(())
}
