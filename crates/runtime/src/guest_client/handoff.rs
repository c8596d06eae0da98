//! A connection to an in-box port, handed over rather than relayed (`POST
//! /v1/ports/{port}/handoff`, `berth_protocol::ports`): in a sandbox the agent passes the
//! TCP socket it connected over the channel's Unix socket, and the host then speaks to the
//! program directly, with nothing copied inside the box.
//!
//! The request is written by hand and the first byte of the answer read with
//! [`berth_handoff::receive_first`], before anything else reads the stream: a descriptor
//! travels with one byte, and a plain read (hyper's buffer) that took the byte would lose
//! it. Anything but a socket is an HTTP error answer, read here within the same bounds as
//! every other answer of the agent.

use berth_handoff::{First, HandoffError, Sender};
use berth_protocol::guest::{Call, MAX_ERROR_BODY_BYTES};
use berth_protocol::ports::PORT_HANDOFF;
use berth_protocol::version::VERSION_HEADER;
use berth_protocol::{ErrorBody, ErrorCode, PROTOCOL_VERSION};
use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use super::{status_code, GuestAddr, GuestClient, GuestError};

/// The most bytes of an answer's head read before the body (berth-init's are ~150).
const MAX_ANSWER_HEAD_BYTES: usize = 8 * 1024;

/// What a handoff gave.
#[derive(Debug)]
pub enum PortHandoff {
    /// The box's own connection to the port; the host holds its only descriptor.
    Socket(TcpStream),
    /// No socket: the caller connects through the upgrade ([`GuestClient::port_connect`]),
    /// which gives the same answers the relay always gave.
    Refused(HandoffRefused),
}

/// Why no socket came.
#[derive(Debug, thiserror::Error)]
pub enum HandoffRefused {
    #[error("the channel is not a Unix socket (a VM's): it carries no descriptors")]
    NotUnix,
    /// An agent from before the handoff answers 404; a channel that carries no descriptors
    /// or a reserved or invalid port, 400.
    #[error("the agent answered {status}: {} ({})", body.error.message, body.error.code)]
    Answered { status: u16, body: ErrorBody },
    #[error("the agent's answer to a handoff was not a socket")]
    Vetting(#[source] HandoffError),
    #[error("the agent's answer to a handoff could not be read: {reason}")]
    Unreadable { reason: &'static str },
}

impl GuestClient {
    /// A TCP connection to `127.0.0.1:<port>` inside the box, handed over by the agent and
    /// accepted only from `sender` (`Sender::BoxInit` but in tests). Nothing listening is
    /// `Remote` with `unavailable`, as for [`GuestClient::port_connect`]; every other
    /// answer but a socket is [`PortHandoff::Refused`].
    pub async fn port_handoff(&self, port: u16, sender: Sender) -> Result<PortHandoff, GuestError> {
        if !matches!(self.addr, GuestAddr::Unix(_)) {
            return Ok(PortHandoff::Refused(HandoffRefused::NotUnix));
        }
        self.require(Call::PortConnect).await?;
        let mut stream = self.connect().await?;
        let head = format!(
            "POST /v1/ports/{port}/{PORT_HANDOFF} HTTP/1.1\r\nhost: berth-init\r\nauthorization: Bearer {}\r\n{VERSION_HEADER}: {PROTOCOL_VERSION}\r\ncontent-length: 0\r\n\r\n",
            self.token.as_str()
        );
        if stream.write_all(head.as_bytes()).await.is_err() {
            let reason = "the agent closed the connection";
            return Ok(PortHandoff::Refused(HandoffRefused::Unreadable { reason }));
        }
        let first = match berth_handoff::receive_first(&stream, sender).await {
            Ok(First::Socket(socket)) => return Ok(PortHandoff::Socket(socket)),
            Ok(First::Byte(byte)) => byte,
            Ok(First::Closed) => {
                let reason = "the agent closed the connection";
                return Ok(PortHandoff::Refused(HandoffRefused::Unreadable { reason }));
            }
            Err(e) => return Ok(PortHandoff::Refused(HandoffRefused::Vetting(e))),
        };
        let (status, body) = match read_answer(first, &mut stream).await {
            Ok(answer) => answer,
            Err(reason) => return Ok(PortHandoff::Refused(HandoffRefused::Unreadable { reason })),
        };
        if body.error.code == ErrorCode::Unavailable {
            return Err(GuestError::Remote { status, body });
        }
        Ok(PortHandoff::Refused(HandoffRefused::Answered {
            status,
            body,
        }))
    }
}

/// The status and error body of an HTTP answer whose first byte is `first`. A success here
/// is no answer to a handoff (the agent sends the socket instead).
async fn read_answer(first: u8, stream: &mut UnixStream) -> Result<(u16, ErrorBody), &'static str> {
    let mut buf = vec![first];
    let (status, head_len, length) = loop {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut answer = httparse::Response::new(&mut headers);
        match answer.parse(&buf) {
            Ok(httparse::Status::Complete(head_len)) => {
                let length = answer
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                    .unwrap_or(0usize);
                break (answer.code.unwrap_or(0), head_len, length);
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_ANSWER_HEAD_BYTES => {}
            Ok(httparse::Status::Partial) => return Err("an answer head past its limit"),
            Err(_) => return Err("not an HTTP answer"),
        }
        read_more(stream, &mut buf, MAX_ANSWER_HEAD_BYTES).await?;
    };
    if (200..300).contains(&status) {
        return Err("a success without a socket");
    }
    if length > MAX_ERROR_BODY_BYTES {
        return Err("an error body past its limit");
    }
    while buf.len() < head_len + length {
        read_more(stream, &mut buf, head_len + length).await?;
    }
    let bytes = &buf[head_len..head_len + length];
    let code = StatusCode::from_u16(status).map_err(|_| "an invalid status")?;
    let body = serde_json::from_slice(bytes).unwrap_or_else(|_| {
        ErrorBody::new(
            status_code(code),
            String::from_utf8_lossy(bytes).into_owned(),
        )
    });
    Ok((status, body))
}

/// Appends what the stream has, up to `limit` bytes in `buf`.
async fn read_more(
    stream: &mut UnixStream,
    buf: &mut Vec<u8>,
    limit: usize,
) -> Result<(), &'static str> {
    let start = buf.len();
    buf.resize(limit, 0);
    let read = stream.read(&mut buf[start..]).await;
    match read {
        Ok(n) if n > 0 => {
            buf.truncate(start + n);
            Ok(())
        }
        _ => Err("the agent closed the connection mid-answer"),
    }
}
