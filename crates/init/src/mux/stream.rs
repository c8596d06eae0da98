//! The handles: [`MuxStream`], one stream (what a vsock stream was), and [`MuxListener`],
//! the streams the peer opens to one port.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, Mutex};

use super::state::{Accepted, Shared};

/// One stream of a [`super::Link`]. Reads end with EOF after the peer's SHUTDOWN,
/// `poll_shutdown` sends this side's; dropping the handle resets the stream (what the peer
/// had already sent it can still read).
pub struct MuxStream {
    shared: Arc<Shared>,
    id: u32,
    port: u32,
    serial: u64,
}

impl MuxStream {
    pub(super) fn new(shared: Arc<Shared>, id: u32, port: u32, serial: u64) -> MuxStream {
        MuxStream {
            shared,
            id,
            port,
            serial,
        }
    }

    /// The stream id on the wire (even: opened by the host, odd: by the guest).
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl fmt::Debug for MuxStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MuxStream")
            .field("id", &self.id)
            .field("port", &self.port)
            .finish()
    }
}

impl Drop for MuxStream {
    fn drop(&mut self) {
        let (id, serial) = (self.id, self.serial);
        self.shared.with(|st| st.drop_stream(id, serial));
    }
}

impl AsyncRead for MuxStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let serial = self.serial;
        self.shared.with(|st| st.poll_read(serial, cx, buf))
    }
}

impl AsyncWrite for MuxStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let serial = self.serial;
        self.shared.with(|st| st.poll_write(serial, cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Written bytes are queued for the link's writer, which flushes each batch.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (id, serial) = (self.id, self.serial);
        self.shared.with(|st| st.shutdown(id, serial));
        Poll::Ready(Ok(()))
    }
}

/// The streams the peer opens to one port. Dropping it refuses later opens to the port.
pub struct MuxListener {
    shared: Arc<Shared>,
    port: u32,
    token: u64,
    incoming: Mutex<mpsc::UnboundedReceiver<Accepted>>,
}

impl MuxListener {
    pub(super) fn new(
        shared: Arc<Shared>,
        port: u32,
        token: u64,
        incoming: mpsc::UnboundedReceiver<Accepted>,
    ) -> MuxListener {
        MuxListener {
            shared,
            port,
            token,
            incoming: Mutex::new(incoming),
        }
    }

    /// The next stream opened to this port; `NotConnected` once the link has ended.
    pub async fn accept(&self) -> io::Result<MuxStream> {
        let accepted = self.incoming.lock().await.recv().await.ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotConnected, "the serial channel is down")
        })?;
        Ok(MuxStream::new(
            self.shared.clone(),
            accepted.id,
            accepted.port,
            accepted.serial,
        ))
    }
}

impl fmt::Debug for MuxListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MuxListener")
            .field("port", &self.port)
            .finish()
    }
}

impl Drop for MuxListener {
    fn drop(&mut self) {
        let (port, token) = (self.port, self.token);
        self.shared.with(|st| st.unlisten(port, token));
        // Streams accepted for this listener and never taken are refused now.
        let incoming = self.incoming.get_mut();
        while let Ok(accepted) = incoming.try_recv() {
            self.shared
                .with(|st| st.drop_stream(accepted.id, accepted.serial));
        }
    }
}
