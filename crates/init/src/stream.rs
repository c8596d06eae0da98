//! One byte-stream type for every channel kind (Unix socket in a sandbox, vsock or a
//! serial channel stream in a VM),
//! so hyper and the egress copy loop are compiled once rather than once per kind: this
//! binary is in every box, and each instantiation costs tens of KiB.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;

use crate::mux::MuxStream;
use crate::vsock::VsockStream;

#[derive(Debug)]
pub enum Stream {
    Unix(UnixStream),
    Vsock(VsockStream),
    Mux(MuxStream),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Vsock(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Mux(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Vsock(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Mux(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
            Stream::Vsock(s) => Pin::new(s).poll_flush(cx),
            Stream::Mux(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Vsock(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Mux(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(flavor = "current_thread")]
    async fn reads_writes_and_shutdown_reach_the_inner_stream() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut s = Stream::Unix(a);
        s.write_all(b"to b").await.unwrap();
        s.flush().await.unwrap();
        let mut buf = [0u8; 4];
        b.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"to b");
        b.write_all(b"to a").await.unwrap();
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"to a");
        s.shutdown().await.unwrap();
        assert_eq!(b.read(&mut buf).await.unwrap(), 0);
    }
}
