//! What the guest channel is served on: the Unix socket in a sandbox's run directory, or
//! port [`berth_protocol::guest::VSOCK_PORT`] in a VM (of vsock, or of the serial
//! channel's mux). [`crate::server::serve`]
//! takes any [`Listener`]; hyper serves any byte stream.

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{UnixListener, UnixStream};

use crate::mux::{MuxListener, MuxStream};
use crate::stream::Stream;
use crate::vsock::{VsockListener, VsockStream};

/// Something that accepts byte-stream connections.
pub trait Listener: Send + 'static {
    type Conn: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    fn accept_conn(&self) -> impl Future<Output = io::Result<Self::Conn>> + Send;

    /// The connection's socket when it can carry a descriptor to the host (a Unix socket:
    /// a sandbox's channel, for `crate::ports::hand_over`).
    fn descriptor_channel(_conn: &Self::Conn) -> Option<BorrowedFd<'_>> {
        None
    }
}

impl Listener for UnixListener {
    type Conn = UnixStream;

    async fn accept_conn(&self) -> io::Result<UnixStream> {
        self.accept().await.map(|(stream, _)| stream)
    }

    fn descriptor_channel(conn: &UnixStream) -> Option<BorrowedFd<'_>> {
        Some(conn.as_fd())
    }
}

impl Listener for VsockListener {
    type Conn = VsockStream;

    async fn accept_conn(&self) -> io::Result<VsockStream> {
        self.accept().await
    }
}

impl Listener for MuxListener {
    type Conn = MuxStream;

    async fn accept_conn(&self) -> io::Result<MuxStream> {
        match self.accept().await {
            // The guest's link ends only when its port fails, which was logged once; a
            // caller retrying would only flood the console.
            Err(err) if err.kind() == io::ErrorKind::NotConnected => std::future::pending().await,
            other => other,
        }
    }
}

/// The guest channel's listener for this environment. Serving this one type (rather than
/// each kind) keeps a single copy of the HTTP server in the binary.
#[derive(Debug)]
pub enum ChannelListener {
    Unix(UnixListener),
    Vsock(VsockListener),
    Mux(MuxListener),
}

impl Listener for ChannelListener {
    type Conn = Stream;

    async fn accept_conn(&self) -> io::Result<Stream> {
        match self {
            ChannelListener::Unix(l) => l.accept_conn().await.map(Stream::Unix),
            ChannelListener::Vsock(l) => l.accept_conn().await.map(Stream::Vsock),
            ChannelListener::Mux(l) => l.accept_conn().await.map(Stream::Mux),
        }
    }

    fn descriptor_channel(conn: &Stream) -> Option<BorrowedFd<'_>> {
        match conn {
            Stream::Unix(unix) => Some(unix.as_fd()),
            Stream::Vsock(_) | Stream::Mux(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Echoes one connection's bytes back, through the trait only.
    async fn echo_once<L: Listener>(listener: L) {
        let mut conn = listener.accept_conn().await.unwrap();
        let mut buf = [0u8; 5];
        conn.read_exact(&mut buf).await.unwrap();
        conn.write_all(&buf).await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_unix_listener_serves_through_the_trait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let listener = ChannelListener::Unix(UnixListener::bind(&path).unwrap());
        let server = tokio::spawn(echo_once(listener));
        let mut client = UnixStream::connect(&path).await.unwrap();
        client.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello");
        server.await.unwrap();
    }
}
