//! Dialling a box's port for the proxy. A sandbox shares the host's kernel: its berth-init
//! hands over the TCP socket it connected to the port (`GuestClient::port_handoff`), and
//! the daemon speaks HTTP to the app on it directly, nothing relayed inside the box. Where
//! no socket comes (a VM's channel carries none; an agent from before the handoff answers
//! `404`; a reserved or invalid port) the port is reached as it always was, through
//! berth-init's relay (`GuestClient::port_connect`), which also gives that case's answer.
//! "Nothing listens" is an answer of both, and is not retried here (`ops::port_connect`
//! waits for the port to listen).

use berth_runtime::{
    GuestClient, GuestError, GuestStream, HandoffRefused, HandoffSender, PortHandoff,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A connection to an app in a box.
#[derive(Debug)]
pub enum AppStream {
    /// The box's own socket, handed over: the daemon holds its only descriptor.
    Handed(TcpStream),
    /// A stream through the guest channel, relayed by berth-init.
    Relayed(GuestStream),
}

/// A byte stream hyper can speak HTTP/1.1 on.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

impl AppStream {
    /// The stream, whichever it is, for hyper.
    pub fn into_io(self) -> Box<dyn Io> {
        match self {
            AppStream::Handed(socket) => Box::new(socket),
            AppStream::Relayed(stream) => Box::new(stream),
        }
    }
}

/// Connects to `port` through `client`'s agent, taking a handed socket only from `sender`
/// (`HandoffSender::BoxInit`, but in tests).
pub async fn dial(
    client: &GuestClient,
    port: u16,
    sender: HandoffSender,
) -> Result<AppStream, GuestError> {
    match client.port_handoff(port, sender).await? {
        PortHandoff::Socket(socket) => {
            let _ = socket.set_nodelay(true);
            Ok(AppStream::Handed(socket))
        }
        PortHandoff::Refused(why) => {
            match &why {
                HandoffRefused::NotUnix => {}
                // Only the box's init could have sent it: worth a look.
                HandoffRefused::Vetting(_) => {
                    tracing::warn!(port, error = %berth_runtime::error_chain(&why), "a port's handed socket was refused; relaying instead");
                }
                HandoffRefused::Answered { .. } | HandoffRefused::Unreadable { .. } => {
                    tracing::debug!(port, error = %why, "no port handoff; relaying instead");
                }
            }
            Ok(AppStream::Relayed(client.port_connect(port).await?))
        }
    }
}

#[cfg(test)]
mod tests;
