//! A streamed response body whose client must keep taking it. A task pulls the source and
//! hands each piece to hyper through a one-piece channel; a piece the client has not taken
//! within `[server] send_timeout_s` ends the source, dropping what it holds (a box's
//! activity guard, the stream from the box and with it the process), so a client that
//! stops reading cannot keep a box awake. A client that goes away ends it at once, as a
//! dropped body did.

use std::time::Duration;

use axum::body::Body;
use berth_protocol::BoxId;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;

/// `source` as a response body, each piece taken by the client within `send_timeout`.
pub fn body<S>(source: S, send_timeout: Duration, box_id: &BoxId) -> Body
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
{
    let (pieces, taken) = mpsc::channel(1);
    let box_id = box_id.clone();
    tokio::spawn(async move {
        let mut source = std::pin::pin!(source);
        loop {
            // A quiet source (a program printing nothing) is waited on as long as it
            // runs, unless the client goes away meanwhile.
            let piece = tokio::select! {
                piece = source.next() => piece,
                () = pieces.closed() => return,
            };
            let Some(piece) = piece else {
                return;
            };
            match tokio::time::timeout(send_timeout, pieces.send(piece)).await {
                Ok(Ok(())) => {}
                Ok(Err(_client_gone)) => return,
                Err(_elapsed) => {
                    tracing::info!(box_id = %box_id, send_timeout_s = send_timeout.as_secs(), "a stream's client took nothing for the send timeout: ending it");
                    return;
                }
            }
        }
    });
    Body::from_stream(futures_util::stream::unfold(taken, |mut taken| async {
        taken.recv().await.map(|piece| (piece, taken))
    }))
}
