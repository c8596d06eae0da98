//! The copy between a terminal's WebSocket (`api/terminals.rs`) and its stream in the box,
//! in the two halves of `api/ws_bridge.rs`: the writing half sends the program's output,
//! the answers to control messages and the pings; the reading half hands the client's
//! input and control messages on. A client that breaks either half's limit is detached
//! (the terminal lives on for its grace, and the box may sleep).

use axum::extract::ws::{Message, WebSocket};
use berth_protocol::terminal::{ClientControl, DetachReason, ServerControl, ShellStatus};
use berth_protocol::{ErrorCode, ErrorDetail};
use berth_runtime::GuestClient;
use futures_util::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::api::ws_bridge::{await_close_reply, read_half, send, write_half, End, HandOn};
use crate::lifecycle::ActivityGuard;
use crate::ops::terminal::Attached;

/// Answers to control messages waiting for the writing half; the reading half waits
/// when they are this many (a client that stops reading is cut by the send deadline).
const REPLIES: usize = 4;

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
    let mut to_terminal = ToTerminal {
        input,
        client: &client,
        id: &id,
        replies,
    };
    let end = tokio::select! {
        end = write_half(&mut to_client, output, Some(replies_rx), &limits) => end,
        end = read_half(&mut from_client, &limits, &mut to_terminal) => end,
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

/// Where the client's messages go: input to the program, control messages to the agent
/// (their errors answered through the writing half).
struct ToTerminal<'a, W> {
    input: W,
    client: &'a GuestClient,
    id: &'a str,
    replies: mpsc::Sender<Message>,
}

impl<W: AsyncWrite + Unpin + Send> HandOn for ToTerminal<'_, W> {
    async fn hand_on(&mut self, message: Message) -> Result<(), End> {
        match message {
            Message::Binary(data) => {
                // An error: the program is gone; its end comes on the output side.
                let _ = self.input.write_all(&data).await;
            }
            Message::Text(control_text) => {
                if let Err(problem) = control(self.client, self.id, control_text.as_str()).await {
                    self.replies
                        .send(text(&problem))
                        .await
                        .map_err(|_| End::ClientGone)?;
                }
            }
            Message::Ping(_) | Message::Pong(_) | Message::Close(_) => {}
        }
        Ok(())
    }
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
