//! Splicing a client's socket and a stream: bounded, half-close aware.

use tokio::io::{AsyncRead, AsyncWrite};

/// Bytes buffered per direction of a spliced connection.
const SPLICE_BUFFER: usize = 32 * 1024;

/// Copies both ways through fixed buffers until both directions ended. An end of file one
/// way shuts that way down on the other side (a stream's SHUTDOWN, a socket's write half),
/// so half-closed connections work; an error drops both (a stream's RESET).
pub async fn splice<A, B>(a: &mut A, b: &mut B) -> std::io::Result<(u64, u64)>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    tokio::io::copy_bidirectional_with_sizes(a, b, SPLICE_BUFFER, SPLICE_BUFFER).await
}
