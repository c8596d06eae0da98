//! [`Link`]: the task that drives one link (a reader and a writer over the same byte
//! stream) and the handle that opens and listens.

use std::fmt;
use std::future::poll_fn;
use std::io;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinHandle;

use super::frame::{self, HEADER_LEN, MAX_PAYLOAD};
use super::state::{Shared, CONTROL_FRAMES};
use super::stream::{MuxListener, MuxStream};
use super::{MuxError, Role};

/// A handle on one link; cheap to clone. The link runs in the task [`Link::start`] spawns.
#[derive(Clone)]
pub struct Link {
    shared: Arc<Shared>,
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("role", &self.shared.role)
            .finish()
    }
}

impl Link {
    /// Drives one link over `io` (the guest's port file, or the bridge's QEMU connection)
    /// in a new task. The task ends with `Ok` when `io` reaches EOF, with `Err` when
    /// reading or writing fails or (host only) when the peer breaks the protocol; a guest
    /// link resets its streams on bad input and goes on. Needs a tokio runtime.
    pub fn start<IO>(io: IO, role: Role) -> (Link, JoinHandle<Result<(), MuxError>>)
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let shared = Shared::new(role);
        let link = Link {
            shared: shared.clone(),
        };
        let task = tokio::spawn(async move {
            let (reader, writer) = tokio::io::split(io);
            let result = tokio::select! {
                r = read_loop(&shared, reader) => r,
                w = write_loop(&shared, writer) => w,
            };
            shared.with(|st| st.close());
            shared.changed.notify_waiters();
            result
        });
        (link, task)
    }

    /// Opens a stream to the peer's `port`, once the peer's HELLO has arrived.
    /// `ConnectionRefused` when the peer refuses, `ConnectionReset` when the link resets
    /// meanwhile, `NotConnected` when the link has ended.
    pub async fn open(&self, port: u32) -> io::Result<MuxStream> {
        loop {
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (ready, closed) = self.shared.with(|st| (st.peer_ready, st.closed));
            if closed {
                return Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the serial channel is down",
                ));
            }
            if ready {
                break;
            }
            changed.await;
        }
        let (id, serial) = self.shared.with(|st| st.open(port))?;
        // Made before the wait: if the caller gives up, dropping it resets the stream.
        let stream = MuxStream::new(self.shared.clone(), id, port, serial);
        poll_fn(|cx| self.shared.with(|st| st.poll_accepted(serial, cx))).await?;
        Ok(stream)
    }

    /// Ids in use on the wire, for tests that wait for a close to finish.
    #[cfg(test)]
    pub(super) fn ids_in_use(&self) -> usize {
        self.shared.with(|st| st.ids_in_use())
    }

    /// Frames other than DATA waiting for the writer.
    #[cfg(test)]
    pub(super) fn queued_control(&self) -> usize {
        self.shared.with(|st| st.queued_control)
    }

    /// Streams the peer opens to `port`: one listener per port (`AddrInUse` otherwise).
    pub fn listen(&self, port: u32) -> io::Result<MuxListener> {
        let (token, incoming) = self.shared.with(|st| st.listen(port))?;
        Ok(MuxListener::new(self.shared.clone(), port, token, incoming))
    }
}

async fn read_loop<R: AsyncRead>(shared: &Arc<Shared>, reader: R) -> Result<(), MuxError> {
    tokio::pin!(reader);
    let frame_max = HEADER_LEN + MAX_PAYLOAD;
    let mut buf = BytesMut::with_capacity(2 * frame_max);
    // The host ignores everything before the guest's HELLO (the tail of what the guest
    // wrote to an earlier host end); so does a guest that lost its place.
    let mut scanning = shared.role == Role::Host;
    loop {
        loop {
            if scanning {
                if !frame::scan_to_hello(&mut buf) {
                    break;
                }
                scanning = false;
            }
            let outcome = frame::decode(&mut buf).and_then(|frame| match frame {
                None => Ok(None),
                Some(frame) => shared.with(|st| st.on_frame(frame, shared)).map(Some),
            });
            match outcome {
                Ok(None) => break,
                Ok(Some(None)) => {}
                Ok(Some(Some((listener, accepted)))) => {
                    // A listener dropped meanwhile: the stream is refused.
                    if let Err(tokio::sync::mpsc::error::SendError(accepted)) =
                        listener.send(accepted)
                    {
                        shared.with(|st| st.drop_stream(accepted.id, accepted.serial));
                    }
                }
                Err(violation) if shared.role == Role::Host => return Err(violation.into()),
                Err(violation) => {
                    // PID 1 must go on: drop every stream and wait for a host to say HELLO.
                    eprintln!(
                        "berth-init: serial channel: {violation}; resetting its streams until the host's next HELLO"
                    );
                    shared.with(|st| {
                        st.reset_all(
                            io::ErrorKind::ConnectionReset,
                            io::ErrorKind::ConnectionReset,
                        );
                        st.peer_ready = false;
                    });
                    // Past the bad byte, so a bad HELLO is not found again.
                    buf.advance(buf.len().min(1));
                    scanning = true;
                }
            }
        }
        hold_while_backlogged(shared).await;
        if buf.capacity() - buf.len() < frame_max {
            buf.reserve(frame_max);
        }
        let n = reader.read_buf(&mut buf).await.map_err(MuxError::Read)?;
        if n == 0 {
            return Ok(());
        }
    }
}

/// Waits while the peer's answers pile up unsent (it sends and does not read).
async fn hold_while_backlogged(shared: &Shared) {
    loop {
        let drained = shared.drained.notified();
        tokio::pin!(drained);
        drained.as_mut().enable();
        if shared.with(|st| st.queued_control < CONTROL_FRAMES) {
            return;
        }
        drained.await;
    }
}

async fn write_loop<W: AsyncWrite>(shared: &Arc<Shared>, writer: W) -> Result<(), MuxError> {
    tokio::pin!(writer);
    let mut buf = BytesMut::new();
    loop {
        shared.with(|st| st.take_batch(&mut buf));
        if buf.is_empty() {
            shared.writer.notified().await;
            continue;
        }
        writer.write_all(&buf).await.map_err(MuxError::Write)?;
        writer.flush().await.map_err(MuxError::Write)?;
        buf.clear();
    }
}
