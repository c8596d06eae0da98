//! The one client every path shares: connect (TCP or Unix), a full TLS handshake with SNI
//! [`HOST`](super::HOST) trusting only the test CA, then one [`Request`].

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::TlsConnector;

use super::upstream::{Request, CHUNK, DONE, PONG};

/// Where a path's client side connects.
#[derive(Debug, Clone)]
pub enum Endpoint {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connecting to {endpoint:?}")]
    Connect {
        endpoint: Endpoint,
        #[source]
        source: io::Error,
    },
    #[error("TLS handshake")]
    Handshake(#[source] io::Error),
    #[error("request/response")]
    Exchange(#[source] io::Error),
    #[error("unexpected answer {got:?}, wanted {want:?}")]
    Answer { got: Vec<u8>, want: Vec<u8> },
    #[error("download ended after {got} of {want} bytes")]
    Short { got: u64, want: u64 },
}

pub struct Client {
    connector: TlsConnector,
    sni: ServerName<'static>,
}

impl Client {
    pub fn new(config: Arc<ClientConfig>, sni: ServerName<'static>) -> Client {
        Client {
            connector: TlsConnector::from(config),
            sni,
        }
    }

    /// Connect + handshake + `S` → the first byte of `pong`; the rest of the connection
    /// (reading to the close) happens after the clock stops.
    pub async fn setup(&self, to: &Endpoint) -> Result<Duration, ClientError> {
        let started = Instant::now();
        match to {
            Endpoint::Tcp(addr) => {
                let s = connect_tcp(*addr, to).await?;
                self.setup_on(s, started).await
            }
            Endpoint::Unix(path) => {
                let s = connect_unix(path, to).await?;
                self.setup_on(s, started).await
            }
        }
    }

    /// Throughput of `request` (a download or upload) after the handshake, in bytes/s.
    pub async fn bulk(&self, to: &Endpoint, request: Request) -> Result<f64, ClientError> {
        match to {
            Endpoint::Tcp(addr) => self.bulk_on(connect_tcp(*addr, to).await?, request).await,
            Endpoint::Unix(path) => self.bulk_on(connect_unix(path, to).await?, request).await,
        }
    }

    async fn setup_on<S>(&self, s: S, started: Instant) -> Result<Duration, ClientError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let mut tls = self
            .connector
            .connect(self.sni.clone(), s)
            .await
            .map_err(ClientError::Handshake)?;
        tls.write_all(&Request::Setup.encode())
            .await
            .map_err(ClientError::Exchange)?;
        let mut first = [0u8; 1];
        tls.read_exact(&mut first)
            .await
            .map_err(ClientError::Exchange)?;
        let took = started.elapsed();
        let mut rest = Vec::new();
        tls.read_to_end(&mut rest)
            .await
            .map_err(ClientError::Exchange)?;
        let mut got = vec![first[0]];
        got.extend(rest);
        if got != PONG {
            return Err(ClientError::Answer {
                got,
                want: PONG.to_vec(),
            });
        }
        Ok(took)
    }

    async fn bulk_on<S>(&self, s: S, request: Request) -> Result<f64, ClientError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let mut tls = self
            .connector
            .connect(self.sni.clone(), s)
            .await
            .map_err(ClientError::Handshake)?;
        let started = Instant::now();
        tls.write_all(&request.encode())
            .await
            .map_err(ClientError::Exchange)?;
        let bytes = match request {
            Request::Setup => 0,
            Request::Download(want) => {
                let mut buf = vec![0u8; CHUNK];
                let mut got = 0u64;
                loop {
                    let n = tls.read(&mut buf).await.map_err(ClientError::Exchange)?;
                    if n == 0 {
                        break;
                    }
                    got += n as u64;
                }
                if got != want {
                    return Err(ClientError::Short { got, want });
                }
                want
            }
            Request::Upload(want) => {
                let chunk = vec![0xa5u8; CHUNK];
                let mut left = want;
                while left > 0 {
                    let n = left.min(CHUNK as u64) as usize;
                    tls.write_all(&chunk[..n])
                        .await
                        .map_err(ClientError::Exchange)?;
                    left -= n as u64;
                }
                tls.flush().await.map_err(ClientError::Exchange)?;
                let mut answer = [0u8; 4];
                tls.read_exact(&mut answer)
                    .await
                    .map_err(ClientError::Exchange)?;
                if &answer != DONE {
                    return Err(ClientError::Answer {
                        got: answer.to_vec(),
                        want: DONE.to_vec(),
                    });
                }
                want
            }
        };
        let took = started.elapsed();
        Ok(bytes as f64 / took.as_secs_f64().max(1e-9))
    }
}

async fn connect_tcp(addr: SocketAddr, to: &Endpoint) -> Result<TcpStream, ClientError> {
    let s = TcpStream::connect(addr)
        .await
        .map_err(|source| ClientError::Connect {
            endpoint: to.clone(),
            source,
        })?;
    // A TLS client does this (curl, rustls-based SDKs); handshake flights must not wait.
    let _ = s.set_nodelay(true);
    Ok(s)
}

async fn connect_unix(path: &std::path::Path, to: &Endpoint) -> Result<UnixStream, ClientError> {
    UnixStream::connect(path)
        .await
        .map_err(|source| ClientError::Connect {
            endpoint: to.clone(),
            source,
        })
}
