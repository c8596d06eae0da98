//! What the daemon's WebSocket bridges share (a terminal's, `api/terminal_bridge.rs`; a
//! desktop's VNC, `api/desktop_vnc.rs`): a stream in the box copied to and from a client
//! in two halves that run side by side, so that neither direction can stop the other,
//! each with its own limit on the client:
//! - the writing half sends the box's bytes as binary messages, anything else the bridge
//!   has to say, and a ping every `[terminals] ping_every_s`; a send the client takes none
//!   of within `[server] send_timeout_s` ends it (the client stopped reading, or its
//!   connection is dead while the box writes);
//! - the reading half hands the client's messages on, each heard within `[terminals]
//!   silent_limit_s` of the one before (a pong counts) and handed on within it too (what
//!   the client sent next waits behind it).

use std::future::Future;

use axum::extract::ws::{Message, WebSocket};
use bytes::Bytes;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::stream_limits::StreamLimits;

/// One read of the box's output, sent as one binary message.
const OUTPUT_CHUNK: usize = 32 * 1024;

pub type ToClient = SplitSink<WebSocket, Message>;
pub type FromClient = SplitStream<WebSocket>;

/// Why a half (and with it the bridge) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The box's side closed the stream.
    Closed,
    /// The client closed, or its connection broke.
    ClientGone,
    /// Nothing heard from the client for the silence limit.
    Silent,
    /// A send waited the send deadline: the client does not read.
    NotReading,
}

/// One message to the client, within the send deadline.
pub async fn send(
    to_client: &mut ToClient,
    message: Message,
    limits: &StreamLimits,
) -> Result<(), End> {
    match tokio::time::timeout(limits.send_timeout, to_client.send(message)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(End::ClientGone),
        Err(_elapsed) => Err(End::NotReading),
    }
}

/// The rest of the closing handshake after the daemon's Close: the client's own. Dropping
/// the connection before it came would leave the client's bytes unread, and the kernel
/// would answer them with a reset that can cost the client the last word it has not read
/// yet.
pub async fn await_close_reply(from_client: &mut FromClient, limits: &StreamLimits) {
    let drained = async { while let Some(Ok(_)) = from_client.next().await {} };
    let _ = tokio::time::timeout(limits.send_timeout, drained).await;
}

/// The box's output, the bridge's own messages (`said`; `None`: it has none), and the
/// pings, until the box's side closes the stream or a send fails.
pub async fn write_half(
    to_client: &mut ToClient,
    mut output: impl AsyncRead + Unpin,
    mut said: Option<mpsc::Receiver<Message>>,
    limits: &StreamLimits,
) -> End {
    let mut buf = vec![0u8; OUTPUT_CHUNK];
    let mut ping = tokio::time::interval(limits.ping_every);
    loop {
        let message = tokio::select! {
            n = output.read(&mut buf) => match n {
                Ok(0) | Err(_) => return End::Closed,
                Ok(n) => Message::Binary(Bytes::copy_from_slice(&buf[..n])),
            },
            Some(message) = next_said(&mut said) => message,
            _ = ping.tick() => Message::Ping(Bytes::new()),
        };
        if let Err(end) = send(to_client, message, limits).await {
            return end;
        }
    }
}

async fn next_said(said: &mut Option<mpsc::Receiver<Message>>) -> Option<Message> {
    match said {
        Some(said) => said.recv().await,
        None => std::future::pending().await,
    }
}

/// Where a bridge's reading half hands the client's messages.
pub trait HandOn {
    /// One message (not a Close: that ends the half); `Err` ends the bridge.
    fn hand_on(&mut self, message: Message) -> impl Future<Output = Result<(), End>> + Send;
}

/// The client's messages, each heard within the silence limit of the one before and
/// handed on within it too, until the client closes or `to` ends it.
pub async fn read_half(
    from_client: &mut FromClient,
    limits: &StreamLimits,
    to: &mut impl HandOn,
) -> End {
    let mut last_heard = Instant::now();
    loop {
        let heard = tokio::time::timeout_at(last_heard + limits.silent_limit, from_client.next());
        let Ok(message) = heard.await else {
            return End::Silent;
        };
        last_heard = Instant::now();
        let message = match message {
            None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return End::ClientGone,
            Some(Ok(message)) => message,
        };
        match tokio::time::timeout_at(last_heard + limits.silent_limit, to.hand_on(message)).await {
            Err(_elapsed) => return End::Silent,
            Ok(Err(end)) => return end,
            Ok(Ok(())) => {}
        }
    }
}
