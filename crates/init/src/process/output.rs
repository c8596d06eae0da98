//! `GET /v1/processes/{id}/output?offset=N`: the process's output from an offset, as NDJSON
//! frames, then its exit. Following is reading: the process never waits for a reader, and a
//! reader that leaves changes nothing but its own stream. `POST /v1/processes?follow=true`
//! answers the same frames from offset 0, after the new process's `ProcessInfo` line.

use std::sync::Arc;
use std::time::Duration;

use berth_protocol::process::ProcessFrame;
use bytes::Bytes;
use tokio::sync::{mpsc, Notify};

use super::tail::Chunk;
use super::Process;

/// An empty line this often keeps an idle stream's connection known to be alive.
const KEEPALIVE: Duration = Duration::from_secs(10);
/// Output taken from the tail at a time.
pub const BATCH_BYTES: usize = 64 * 1024;

/// Starts following `process` from `offset`; the stream ends after the `exit` frame.
pub fn follow(process: Arc<Process>, offset: u64) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(send_output(process, offset, tx));
    rx
}

/// The just started `process`'s info line, then all its output and its exit.
pub fn started_and_followed(process: Arc<Process>) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(8);
    let info = line(&process.info());
    tokio::spawn(async move {
        if tx.send(info).await.is_ok() {
            send_output(process, 0, tx).await;
        }
    });
    rx
}

async fn send_output(process: Arc<Process>, offset: u64, tx: mpsc::Sender<Bytes>) {
    send_tail(&tx, offset, &process.changed, |from| {
        let state = process.state();
        let chunks = state.tail.from(from, BATCH_BYTES);
        let end = state.exit.map(|exit| {
            Some(line(&ProcessFrame::Exit {
                exit,
                output_end: state.tail.end(),
            }))
        });
        (chunks, end)
    })
    .await
}

/// What a follower reads at an offset: the chunks kept from there, and whether the stream
/// ends once they are sent (`Some`, with its last line if it has one) or waits for more.
pub type TailRead = (Vec<Chunk>, Option<Option<Bytes>>);

/// Sends a numbered output from `offset` as `output` frames while it grows (`changed` is
/// woken on new output), with an empty keepalive line when nothing comes: a process's
/// output and a service's log are both followed this way. `read` is called under no await.
pub async fn send_tail(
    tx: &mpsc::Sender<Bytes>,
    offset: u64,
    changed: &Notify,
    mut read: impl FnMut(u64) -> TailRead,
) {
    let mut sent_to = offset;
    loop {
        let woken = changed.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let (chunks, end) = read(sent_to);
        if !chunks.is_empty() {
            for chunk in chunks {
                sent_to = chunk.offset + chunk.data.len() as u64;
                let frame = ProcessFrame::Output {
                    stream: chunk.stream,
                    offset: chunk.offset,
                    data: chunk.data,
                };
                if tx.send(line(&frame)).await.is_err() {
                    return;
                }
            }
            continue;
        }
        if let Some(last) = end {
            if let Some(last) = last {
                let _ = tx.send(last).await;
            }
            return;
        }
        tokio::select! {
            _ = &mut woken => {}
            _ = tx.closed() => return,
            _ = tokio::time::sleep(KEEPALIVE) => {
                if tx.send(Bytes::from_static(b"\n")).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// One NDJSON line of `frame`.
fn line(frame: &impl serde::Serialize) -> Bytes {
    let mut line = serde_json::to_vec(frame).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}
