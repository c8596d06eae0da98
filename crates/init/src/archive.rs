//! `files/archive`: whole directories as tar streams, both ways ([`pack`], [`unpack`]).
//!
//! Both run on a thread of their own under the caller's [`FsIdentity`] and meet the HTTP
//! side through tokio-util's bridges ([`SyncIoBridge`] over a pipe or a request body's
//! stream) that hold a few chunks, so memory stays constant whatever the tree's size, and
//! each side goes only as fast as the other. Not on the runtime's blocking pool: it has
//! four threads, and a transfer lasts as long as its slowest reader, which must not hold
//! up every other file call.

mod beneath;
mod pack;
mod unpack;

use std::future::ready;
use std::io::{self, BufWriter, Read, Write};
use std::path::PathBuf;
use std::pin::Pin;
use std::task::Poll;

use berth_protocol::files::ArchiveWritten;
use berth_protocol::guest::FileQuery;
use bytes::Bytes;
use futures_util::stream::{self, Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::io::{ReaderStream, StreamReader, SyncIoBridge};

use crate::error::ApiError;
use crate::files::{Chunk, FsIdentity};
use crate::slots::Slots;

/// Size of the pieces a tar stream is sent in.
const CHUNK_BYTES: usize = 64 * 1024;
/// What the pipe between a download's walk and its HTTP side holds: a few chunks.
const PIPE_BYTES: usize = 4 * CHUNK_BYTES;

/// Archive transfers (both directions) running at once.
pub static TRANSFERS: Slots = Slots::new("archive transfers", 16);

/// A tar download as the HTTP side sends it: the tar's bytes, then an error if the pack
/// failed.
pub type TarStream = Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send>>;

/// Opens `q.path` as the caller, then streams its tar. An open that fails is the call's
/// error; a failure later (an unreadable file deep in the tree) ends the stream with an
/// error after the bytes made so far, which cuts the response: a partial tar is never
/// passed off as a whole one. A client that goes away closes the pipe, which fails the
/// next write and stops the walk.
pub async fn read(q: FileQuery) -> Result<TarStream, ApiError> {
    let slot = TRANSFERS.take()?;
    let (opened_tx, opened_rx) = oneshot::channel();
    let (failed_tx, failed_rx) = oneshot::channel::<io::Error>();
    let (tar_in, tar_out) = tokio::io::duplex(PIPE_BYTES);
    let out = SyncIoBridge::new(tar_out);
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
        let mut out = BufWriter::with_capacity(CHUNK_BYTES, out);
        if let Err(err) = pack::pack(root, &mut out).and_then(|()| out.flush()) {
            let _ = failed_tx.send(err);
        }
    })?;
    opened_rx.await.map_err(|_| ApiError::Worker)??;
    // Resolves once the thread is done: with its error, or cancelled after a whole tar.
    let failure = stream::once(failed_rx).filter_map(|failed| ready(failed.ok().map(Err)));
    Ok(Box::pin(
        ReaderStream::with_capacity(tar_in, CHUNK_BYTES).chain(failure),
    ))
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

#[cfg(test)]
mod tests;
