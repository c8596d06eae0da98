//! Reading the TLS ClientHello incrementally: a box may deliver it in many tiny writes, so
//! the gateway reads until the parser stops asking for more, up to a hard cap.

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::client_hello::{
    parse_client_hello, ClientHelloInfo, HelloError, MAX_CLIENT_HELLO_BYTES,
};
use crate::hostname::HostError;

use super::decision::DenyReason;

#[derive(Debug, thiserror::Error)]
pub enum HelloReadError {
    #[error("reading the ClientHello from the box")]
    Read(#[source] std::io::Error),
    #[error("the box closed the stream inside the ClientHello ({have} bytes read)")]
    Closed { have: usize },
    #[error("the ClientHello is larger than {MAX_CLIENT_HELLO_BYTES} bytes")]
    TooLarge,
    #[error("the ClientHello is malformed")]
    Malformed(#[source] HelloError),
}

impl HelloReadError {
    pub fn deny_reason(&self) -> DenyReason {
        match self {
            HelloReadError::Read(_) | HelloReadError::Closed { .. } => DenyReason::ClosedEarly,
            HelloReadError::TooLarge => DenyReason::BadClientHello,
            HelloReadError::Malformed(e) => match e {
                HelloError::NoSni => DenyReason::NoSni,
                HelloError::EchOffered => DenyReason::Ech,
                HelloError::IpLiteralSni => DenyReason::IpLiteral,
                HelloError::BadSni { .. } => DenyReason::BadHost,
                HelloError::Incomplete { .. }
                | HelloError::NotTls
                | HelloError::NotClientHello
                | HelloError::TooLarge
                | HelloError::Malformed { .. }
                | HelloError::DuplicateSni => DenyReason::BadClientHello,
            },
        }
    }
}

/// Reads into `buf` (which may already hold the first bytes) until it holds a complete
/// ClientHello, and parses it. Everything read stays in `buf`, to be replayed upstream.
pub async fn read_client_hello<R: AsyncRead + Unpin>(
    stream: &mut R,
    buf: &mut Vec<u8>,
) -> Result<ClientHelloInfo, HelloReadError> {
    let mut chunk = [0u8; 4096];
    loop {
        match parse_client_hello(buf) {
            Err(HelloError::Incomplete { .. }) => {}
            Err(e) => return Err(HelloReadError::Malformed(e)),
            Ok(info) => return Ok(info),
        }
        if buf.len() >= MAX_CLIENT_HELLO_BYTES {
            return Err(HelloReadError::TooLarge);
        }
        // Never read past the cap; bytes after the ClientHello (there should be none before
        // the server answers) would be replayed too, which is harmless.
        let room = (MAX_CLIENT_HELLO_BYTES - buf.len()).min(chunk.len());
        let n = stream
            .read(&mut chunk[..room])
            .await
            .map_err(HelloReadError::Read)?;
        if n == 0 {
            return Err(HelloReadError::Closed { have: buf.len() });
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The CONNECT host's refusal when it is not a valid public DNS name.
pub(crate) fn host_deny(e: &HostError) -> DenyReason {
    match e {
        HostError::IpLiteral => DenyReason::IpLiteral,
        _ => DenyReason::BadHost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stream_ending_inside_the_hello_is_closed_early() {
        let mut input: &[u8] = b"\x16\x03\x01\x00\x40\x01";
        let mut buf = Vec::new();
        let err = read_client_hello(&mut input, &mut buf).await.unwrap_err();
        assert!(matches!(err, HelloReadError::Closed { have: 6 }), "{err}");
        assert_eq!(err.deny_reason(), DenyReason::ClosedEarly);
    }

    #[tokio::test]
    async fn non_handshake_record_is_a_bad_client_hello() {
        // An alert record: TLS, but never a ClientHello.
        let mut input: &[u8] = b"\x15\x03\x03\x00\x02\x02\x28";
        let mut buf = Vec::new();
        let err = read_client_hello(&mut input, &mut buf).await.unwrap_err();
        assert_eq!(err.deny_reason(), DenyReason::BadClientHello, "{err}");
    }

    #[tokio::test]
    async fn never_buffers_past_the_cap() {
        // A record header announcing a fragment of the maximum size, followed by more
        // fragments: the reader must stop at the cap, whatever the parser says.
        let mut flood = Vec::new();
        while flood.len() < MAX_CLIENT_HELLO_BYTES * 2 {
            flood.extend([0x16, 0x03, 0x01, 0x00, 0x04, 0x01, 0x00, 0xff, 0xff]);
        }
        let mut input: &[u8] = &flood;
        let mut buf = Vec::new();
        let err = read_client_hello(&mut input, &mut buf).await.unwrap_err();
        assert!(buf.len() <= MAX_CLIENT_HELLO_BYTES, "{}", buf.len());
        assert_eq!(err.deny_reason(), DenyReason::BadClientHello, "{err}");
    }
}
