//! `GET /v1/events?after=N`: drops the journal's entries up to `N` (the host has them),
//! then streams every event with `seq > N` (from memory, or from the file for old ones),
//! then new ones as they come, until the client disconnects. An empty line is sent as a
//! keep-alive now and then, which is also how a silent disconnect is noticed.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::event_log::{read_file_after, Next};
use super::{lock, Harness};
use crate::error::ApiError;

const KEEPALIVE: Duration = Duration::from_secs(10);

pub fn open(h: Arc<Harness>, after: u64) -> Result<mpsc::Receiver<Bytes>, ApiError> {
    if let Some(j) = &h.journals {
        lock(&j.events)
            .drop_through(after)
            .map_err(|source| ApiError::Journal {
                op: "cut the event journal",
                source,
            })?;
    }
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(pump(h, after, tx));
    Ok(rx)
}

async fn pump(h: Arc<Harness>, mut cursor: u64, tx: mpsc::Sender<Bytes>) {
    let mut newest = h.last_seq.subscribe();
    loop {
        newest.borrow_and_update();
        // Catch up with everything journalled so far.
        loop {
            let next = match &h.journals {
                Some(j) => lock(&j.events).next_after(cursor),
                None => Next::Events(Vec::new()),
            };
            let batch = match next {
                Next::Events(batch) => batch,
                Next::FromFile(path) => {
                    let after = cursor;
                    let read = tokio::task::spawn_blocking(move || read_file_after(&path, after))
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .unwrap_or_default();
                    if read.is_empty() {
                        // Dropped from the file meanwhile: continue with what memory has.
                        let skip_to = h.journals.as_ref().map_or(cursor, |j| {
                            let log = lock(&j.events);
                            log.ring_first()
                                .map_or(log.last_seq(), |first| first.saturating_sub(1))
                        });
                        cursor = cursor.max(skip_to);
                    }
                    read
                }
            };
            if batch.is_empty() && cursor >= *newest.borrow() {
                break;
            }
            for (seq, line) in batch {
                if tx.send(line).await.is_err() {
                    return;
                }
                cursor = seq;
            }
        }
        tokio::select! {
            _ = tx.closed() => return,
            changed = newest.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(KEEPALIVE) => {
                if tx.send(Bytes::from_static(b"\n")).await.is_err() {
                    return;
                }
            }
        }
    }
}
