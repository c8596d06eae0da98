//! `GET /v1/services/{name}/logs?offset=N&follow=B`: a service's log from an offset, as
//! NDJSON `output` frames. Without `follow` the stream ends at the log's end; with it, it
//! stays open for what comes (across the service's restarts) until the reader leaves.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::Service;
use crate::process::{send_tail, BATCH_BYTES};

pub fn read(service: Arc<Service>, offset: u64, follow: bool) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        send_tail(&tx, offset, &service.logged, |from| {
            let chunks = service.life().log.from(from, BATCH_BYTES);
            (chunks, (!follow).then_some(None))
        })
        .await
    });
    rx
}
