//! `files/archive`: whole directories as tar streams, both ways ([`pack`], [`unpack`]).
//!
//! Both run on a thread of their own under the caller's [`FsIdentity`] and meet the HTTP
//! side through a channel of a few chunks, so memory stays constant whatever the tree's
//! size, and each side goes only as fast as the other. Not on the runtime's blocking pool:
//! it has four threads, and a transfer lasts as long as its slowest reader, which must not
//! hold up every other file call.

mod beneath;
mod pack;
mod unpack;

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::task::Poll;

use berth_protocol::files::ArchiveWritten;
use berth_protocol::guest::FileQuery;
use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::io::{StreamReader, SyncIoBridge};

use crate::error::ApiError;
use crate::files::{Chunk, FsIdentity};
use crate::slots::Slots;

/// Size of the pieces a tar stream is sent in.
const CHUNK_BYTES: usize = 64 * 1024;

/// Archive transfers (both directions) running at once.
pub static TRANSFERS: Slots = Slots::new("archive transfers", 16);

/// Opens `q.path` as the caller, then streams its tar through the returned channel. An
/// open that fails is the call's error; a failure later (an unreadable file deep in the
/// tree) ends the stream with an error, which cuts the response: a partial tar is never
/// passed off as a whole one.
pub async fn read(q: FileQuery) -> Result<mpsc::Receiver<io::Result<Bytes>>, ApiError> {
    let slot = TRANSFERS.take()?;
    let (opened_tx, opened_rx) = oneshot::channel();
    let (tx, rx) = mpsc::channel(4);
    spawn("berth-tar-out", move || {
        let _slot = slot;
        let _identity = FsIdentity::enter(q.user);
        let root = match pack::open_root(&PathBuf::from(&q.path)) {
            Ok(root) => root,
            Err(err) => return drop(opened_tx.send(Err(err))),
        };
        if opened_tx.send(Ok(())).is_err() {
            return;
        }
        let mut out = ChannelWriter {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK_BYTES),
        };
        if let Err(err) = pack::pack(root, &mut out).and_then(|()| out.send()) {
            let _ = tx.blocking_send(Err(err));
        }
    })?;
    opened_rx.await.map_err(|_| ApiError::Worker)??;
    Ok(rx)
}

/// Starts extracting the tar whose chunks arrive on `chunks` into `q.path`, as the caller;
/// the returned channel answers when it is done.
pub fn start_write(
    q: FileQuery,
    chunks: mpsc::Receiver<Chunk>,
) -> Result<oneshot::Receiver<Result<ArchiveWritten, ApiError>>, ApiError> {
    let slot = TRANSFERS.take()?;
    let (done_tx, done_rx) = oneshot::channel();
    let input = SyncIoBridge::new(StreamReader::new(body_stream(chunks)));
    spawn("berth-tar-in", move || {
        let _slot = slot;
        let _ = done_tx.send(write(&q, input));
    })?;
    Ok(done_rx)
}

fn spawn(name: &str, work: impl FnOnce() + Send + 'static) -> Result<(), ApiError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(work)
        .map(drop)
        .map_err(|source| ApiError::Fs {
            op: "start a thread for",
            path: name.into(),
            source,
        })
}

/// Extracts the tar whose chunks arrive on `chunks` into `q.path`, as the caller, on this
/// thread.
fn write(q: &FileQuery, input: impl Read) -> Result<ArchiveWritten, ApiError> {
    let _identity = FsIdentity::enter(q.user);
    unpack::unpack(&PathBuf::from(&q.path), q.user, input)
}

/// A request body's chunks as a stream that ends at [`Chunk::End`]; a body that stops
/// without it (the client went away, or sent too much) is an error, never a clean end of
/// the archive.
fn body_stream(
    mut chunks: mpsc::Receiver<Chunk>,
) -> impl Stream<Item = io::Result<Bytes>> + Send + Unpin {
    let mut ended = false;
    futures_util::stream::poll_fn(move |cx| {
        if ended {
            return Poll::Ready(None);
        }
        chunks.poll_recv(cx).map(|chunk| match chunk {
            Some(Chunk::Data(data)) => Some(Ok(data)),
            Some(Chunk::End) => {
                ended = true;
                None
            }
            None => Some(Err(io::Error::from_raw_os_error(libc::ECANCELED))),
        })
    })
}

/// A `Write` that sends what it is given in [`CHUNK_BYTES`] pieces; fails once the
/// reader is gone (the client disconnected), which stops the walk.
struct ChannelWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK_BYTES));
        self.tx
            .blocking_send(Ok(Bytes::from(chunk)))
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK_BYTES - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK_BYTES {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

#[cfg(test)]
mod tests;
