//! `GET /v1/ports/{port}`: the host's way into a program listening inside the box. The
//! connection is made before the `101`, so "nothing listens" is an answer, not a stream
//! that closes at once.

use berth_protocol::guest::{EGRESS_PROXY_PORT, EGRESS_TLS_PORT};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::error::ApiError;

/// Connects to `127.0.0.1:<port>` inside the box. berth-init's own egress listeners are
/// not a box's ports.
pub async fn connect(port: &str) -> Result<TcpStream, ApiError> {
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or(ApiError::BadQuery {
            name: "port",
            reason: "must be a TCP port between 1 and 65535",
        })?;
    if port == EGRESS_TLS_PORT || port == EGRESS_PROXY_PORT {
        return Err(ApiError::ReservedPort { port });
    }
    match TcpStream::connect(("127.0.0.1", port)).await {
        Ok(stream) => {
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Err(source) => Err(ApiError::PortClosed { port, source }),
    }
}

/// Bytes copied at a time each way. With tokio's default 8 KiB, a download through the
/// ports proxy ran at half the speed (benches/benches/ports.rs, same run: 0.12-0.13× the
/// host's direct speed, against 0.28-0.53× with these); two per connection stay small.
const SPLICE_BUF: usize = 64 * 1024;

/// Copies both ways until either side closes.
pub async fn splice(upgrade: OnUpgrade, mut stream: TcpStream) {
    if let Ok(upgraded) = upgrade.await {
        let mut upgraded = TokioIo::new(upgraded);
        let _ = tokio::io::copy_bidirectional_with_sizes(
            &mut upgraded,
            &mut stream,
            SPLICE_BUF,
            SPLICE_BUF,
        )
        .await;
    }
}
