//! One attachment: the upgraded connection's bytes become the terminal's input, and its
//! output from the attachment's offset is copied back until the program has ended and
//! everything is sent, the client leaves, or a newer attachment takes over.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use super::Terminal;

/// The most output sent in one write.
const SEND_CHUNK: usize = 64 * 1024;

/// An attachment that has begun: it owns the terminal's output from `start` on.
#[derive(Debug)]
pub struct Attachment {
    terminal: Arc<Terminal>,
    generation: u64,
    start: u64,
}

impl Terminal {
    /// Begins an attachment at `offset` (default: where the previous one stopped), ending
    /// any previous one. The returned [`Attachment::start`] may differ: the oldest byte
    /// kept, when `offset` is gone.
    pub fn attach(self: &Arc<Self>, offset: Option<u64>) -> Attachment {
        let mut state = self.state();
        state.attachment += 1;
        state.attached = true;
        let start = state.ring.clamp(offset.unwrap_or(state.delivered));
        state.delivered = start;
        let generation = state.attachment;
        drop(state);
        self.changed.notify_waiters();
        Attachment {
            terminal: self.clone(),
            generation,
            start,
        }
    }
}

impl Attachment {
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Copies both ways over `io` until the attachment ends; then the terminal is
    /// detached (unless a newer attachment already holds it).
    pub async fn run<Io: AsyncRead + AsyncWrite>(self, io: Io) {
        let (mut from_client, mut to_client) = tokio::io::split(io);
        tokio::select! {
            _ = self.input(&mut from_client) => {}
            _ = self.output(&mut to_client) => {
                let _ = to_client.shutdown().await;
            }
        }
        self.detach();
    }

    /// Ends the attachment (a no-op when a newer one holds the terminal). Also for an
    /// attachment whose connection never got upgraded.
    pub fn detach(&self) {
        let term = &self.terminal;
        {
            let mut state = term.state();
            if state.attachment == self.generation {
                state.attached = false;
                state.detached_since = Instant::now();
            }
        }
        term.changed.notify_waiters();
    }

    /// Client bytes to the PTY, until the client closes or fails.
    async fn input(&self, from_client: &mut (impl AsyncRead + Unpin)) {
        let mut buf = vec![0u8; 8 * 1024];
        loop {
            match from_client.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if self.terminal.write_input(&buf[..n]).await.is_err() {
                        // The program is gone; keep the output side going until it ends.
                        return std::future::pending().await;
                    }
                }
            }
        }
    }

    /// Output to the client from `start`, until everything is sent after the end, or a
    /// newer attachment takes over.
    async fn output(&self, to_client: &mut (impl AsyncWrite + Unpin)) {
        let term = &self.terminal;
        let mut sent = self.start;
        loop {
            let mut chunk = Vec::new();
            let mut finished = false;
            term.wait_until(|t| {
                let state = t.state();
                if state.attachment != self.generation {
                    finished = true;
                    return true;
                }
                // A position the ring no longer holds (never, while attached: the program
                // is held back instead) skips to the oldest byte.
                sent = state.ring.clamp(sent);
                chunk = state.ring.read(sent, SEND_CHUNK);
                // The end needs both: all output read, and the exit known (the reaper may
                // learn of it just after the PTY reports its last close).
                finished = chunk.is_empty() && state.output_done && state.exit.is_some();
                finished || !chunk.is_empty()
            })
            .await;
            if finished {
                return;
            }
            if to_client.write_all(&chunk).await.is_err() || to_client.flush().await.is_err() {
                return;
            }
            sent += chunk.len() as u64;
            {
                let mut state = term.state();
                if state.attachment != self.generation {
                    return;
                }
                state.delivered = sent;
            }
            term.changed.notify_waiters();
        }
    }
}
