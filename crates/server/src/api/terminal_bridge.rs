//! The copy between a terminal's WebSocket (`api/terminals.rs`) and its stream in the box,
//! in two halves that run side by side, so that neither direction can stop the other:
//! the writing half sends the program's output, the answers to control messages and a
//! ping every `[terminals] ping_every_s`; the reading half hands the client's input and
//! control messages on. Each half has its own limit on the client, and a client that
//! breaks either is detached (the terminal lives on for its grace, and the box may
//! sleep):
//! - a send the client takes none of within `[server] send_timeout_s` (it stopped
//!   reading, or its connection is dead while the program writes);
//! - nothing heard from the client (no pong, no input) for `[terminals] silent_limit_s`,
//!   handing its input to the program included (what the client sent next waits behind
//!   it).

use axum::extract::ws::{Message, WebSocket};
use berth_protocol::terminal::{ClientControl, DetachReason, ServerControl, ShellStatus};
use berth_protocol::{ErrorCode, ErrorDetail};
use berth_runtime::GuestClient;
use bytes::Bytes;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::lifecycle::ActivityGuard;
use crate::ops::terminal::Attached;
use crate::stream_limits::StreamLimits;

/// One read of terminal output, sent as one binary message.
const OUTPUT_CHUNK: usize = 32 * 1024;
/// Answers to control messages waiting for the writing half; the reading half waits
/// when they are this many (a client that stops reading is cut by the send deadline).
const REPLIES: usize = 4;

type ToClient = SplitSink<WebSocket, Message>;
type FromClient = SplitStream<WebSocket>;

/// Why the bridge ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The agent closed the stream: the program ended and all its output is sent, or
    /// another client took the terminal over.
    Closed,
    /// The client closed, or its connection broke.
    ClientGone,
    /// Nothing heard from the client for the silence limit.
    Silent,
    /// A send waited the send deadline: the client does not read.
    NotReading,
}

/// Copies between the WebSocket and the terminal until one side ends. The activity
/// guard keeps the box awake for exactly that long.
pub async fn bridge(socket: WebSocket, attached: Attached, busy: ActivityGuard) {
    let Attached {
        client,
        id,
        stream,
        limits,
    } = attached;
    let (mut to_client, mut from_client) = socket.split();
    let hello = ServerControl::Hello {
        id: id.clone(),
        offset: stream.start,
    };
    if send(&mut to_client, text(&hello), &limits).await.is_err() {
        return;
    }
    let (output, input) = tokio::io::split(stream.stream);
    let (replies, replies_rx) = mpsc::channel(REPLIES);
    let end = tokio::select! {
        end = write_half(&mut to_client, output, replies_rx, &limits) => end,
        end = read_half(&mut from_client, input, &client, &id, replies, &limits) => end,
    };
    match end {
        End::Closed => {
            let last = last_word(&client, &id).await;
            if send(&mut to_client, text(&last), &limits).await.is_ok()
                && send(&mut to_client, Message::Close(None), &limits)
                    .await
                    .is_ok()
            {
                await_close_reply(&mut from_client, &limits).await;
            }
        }
        End::Silent => {
            tracing::info!(box_id = %busy.box_id(), terminal = %id, "terminal client silent too long: detaching");
        }
        End::NotReading => {
            tracing::info!(box_id = %busy.box_id(), terminal = %id, "terminal client takes none of the output: detaching");
        }
        End::ClientGone => {}
    }
    drop(busy);
}

/// One message to the client, within the send deadline.
async fn send(
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

/// The rest of the closing handshake: the client's own Close. Dropping the connection
/// before it came would leave the client's bytes unread, and the kernel would answer
/// them with a reset that can cost the client the last word it has not read yet.
async fn await_close_reply(from_client: &mut FromClient, limits: &StreamLimits) {
    let drained = async { while let Some(Ok(_)) = from_client.next().await {} };
    let _ = tokio::time::timeout(limits.send_timeout, drained).await;
}

/// The program's output, the answers to control messages, and the pings, until the
/// agent closes the stream or a send fails.
async fn write_half(
    to_client: &mut ToClient,
    mut output: impl AsyncRead + Unpin,
    mut replies: mpsc::Receiver<Message>,
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
            Some(reply) = replies.recv() => reply,
            _ = ping.tick() => Message::Ping(Bytes::new()),
        };
        if let Err(end) = send(to_client, message, limits).await {
            return end;
        }
    }
}

/// The client's messages, each heard within the silence limit of the one before and
/// handed on within it too.
async fn read_half(
    from_client: &mut FromClient,
    mut input: impl AsyncWrite + Unpin,
    client: &GuestClient,
    id: &str,
    replies: mpsc::Sender<Message>,
    limits: &StreamLimits,
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
        let handed = hand_on(message, &mut input, client, id, &replies);
        match tokio::time::timeout_at(last_heard + limits.silent_limit, handed).await {
            Err(_elapsed) => return End::Silent,
            Ok(Err(end)) => return end,
            Ok(Ok(())) => {}
        }
    }
}

/// Input to the program; a control message to the agent (its error answered).
async fn hand_on(
    message: Message,
    input: &mut (impl AsyncWrite + Unpin),
    client: &GuestClient,
    id: &str,
    replies: &mpsc::Sender<Message>,
) -> Result<(), End> {
    match message {
        Message::Binary(data) => {
            // An error: the program is gone; its end comes on the output side.
            let _ = input.write_all(&data).await;
        }
        Message::Text(control_text) => {
            if let Err(problem) = control(client, id, control_text.as_str()).await {
                replies
                    .send(text(&problem))
                    .await
                    .map_err(|_| End::ClientGone)?;
            }
        }
        Message::Ping(_) | Message::Pong(_) | Message::Close(_) => {}
    }
    Ok(())
}

/// What the client is told when the agent closed the stream: the program's exit, or that
/// another client took the terminal over.
async fn last_word(client: &GuestClient, id: &str) -> ServerControl {
    match client.terminal(id).await {
        Ok(info) => match info.exit {
            Some(exit) => ServerControl::Exit {
                exit: ShellStatus {
                    code: exit.shell_status(),
                },
            },
            None => ServerControl::Detached {
                detached: DetachReason {
                    reason: "another client attached to this terminal".into(),
                },
            },
        },
        Err(e) => problem(
            ErrorCode::Unavailable,
            format!("the box stopped: {}", berth_runtime::error_chain(&e)),
        ),
    }
}

/// A control message from the client; `Err` is the error to send back.
async fn control(client: &GuestClient, id: &str, message: &str) -> Result<(), ServerControl> {
    let control: ClientControl = serde_json::from_str(message).map_err(|e| {
        problem(
            ErrorCode::InvalidRequest,
            format!("a control message is {{\"resize\":{{\"cols\",\"rows\"}}}} or {{\"signal\":\"INT\"}}: {e}"),
        )
    })?;
    let result = match control {
        ClientControl::Resize(size) => client.terminal_resize(id, size).await,
        ClientControl::Signal(signal) => client.terminal_signal(id, &signal).await,
    };
    result.map_err(|e| problem(e.code(), berth_runtime::error_chain(&e)))
}

fn problem(code: ErrorCode, message: String) -> ServerControl {
    ServerControl::Error {
        error: ErrorDetail { code, message },
    }
}

fn text(control: &ServerControl) -> Message {
    // A ServerControl is strings, numbers and an enum: it always serialises.
    let json = serde_json::to_string(control).unwrap_or_default();
    Message::Text(json.into())
}
