//! `GET /v1/services/{name}/logs?offset=N&follow=B`: a service's log from an offset, as
//! NDJSON `output` frames. Without `follow` the stream ends at the log's end; with it, it
//! stays open for what comes (across the service's restarts) until the reader leaves.

use std::sync::Arc;
use std::time::Duration;

use berth_protocol::process::ProcessFrame;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::Service;
use crate::process::ndjson_line;

/// An empty line this often keeps an idle stream's connection known to be alive.
const KEEPALIVE: Duration = Duration::from_secs(10);
/// Log taken at a time.
const BATCH_BYTES: usize = 64 * 1024;

pub fn read(service: Arc<Service>, offset: u64, follow: bool) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(send_log(service, offset, follow, tx));
    rx
}

async fn send_log(service: Arc<Service>, offset: u64, follow: bool, tx: mpsc::Sender<Bytes>) {
    let mut sent_to = offset;
    loop {
        let logged = service.logged.notified();
        tokio::pin!(logged);
        logged.as_mut().enable();
        let chunks = service.life().log.from(sent_to, BATCH_BYTES);
        if !chunks.is_empty() {
            for chunk in chunks {
                sent_to = chunk.offset + chunk.data.len() as u64;
                let frame = ProcessFrame::Output {
                    stream: chunk.stream,
                    offset: chunk.offset,
                    data: chunk.data,
                };
                if tx.send(ndjson_line(&frame)).await.is_err() {
                    return;
                }
            }
            continue;
        }
        if !follow {
            return;
        }
        tokio::select! {
            _ = &mut logged => {}
            _ = tx.closed() => return,
            _ = tokio::time::sleep(KEEPALIVE) => {
                if tx.send(Bytes::from_static(b"\n")).await.is_err() {
                    return;
                }
            }
        }
    }
}
