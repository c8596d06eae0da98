//! `GET /v1/processes/{id}/output?offset=N`: the process's output from an offset, as NDJSON
//! frames, then its exit. Following is reading: the process never waits for a reader, and a
//! reader that leaves changes nothing but its own stream. `POST /v1/processes?follow=true`
//! answers the same frames from offset 0, after the new process's `ProcessInfo` line.

use std::sync::Arc;
use std::time::Duration;

use berth_protocol::process::ProcessFrame;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::Process;

/// An empty line this often keeps an idle stream's connection known to be alive.
const KEEPALIVE: Duration = Duration::from_secs(10);
/// Output taken from the tail at a time.
const BATCH_BYTES: usize = 64 * 1024;

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
    let mut sent_to = offset;
    loop {
        let changed = process.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let (chunks, exit, end) = {
            let state = process.state();
            (
                state.tail.from(sent_to, BATCH_BYTES),
                state.exit,
                state.tail.end(),
            )
        };
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
        if let Some(exit) = exit {
            let _ = tx
                .send(line(&ProcessFrame::Exit {
                    exit,
                    output_end: end,
                }))
                .await;
            return;
        }
        tokio::select! {
            _ = &mut changed => {}
            _ = tx.closed() => return,
            _ = tokio::time::sleep(KEEPALIVE) => {
                if tx.send(Bytes::from_static(b"\n")).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// One NDJSON line of `frame` (the service logs' frames too).
pub fn line(frame: &impl serde::Serialize) -> Bytes {
    let mut line = serde_json::to_vec(frame).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}
