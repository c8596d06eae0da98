//! Gzip both ways, streamed: a download the SDK asks for with `Accept-Encoding: gzip`, and
//! an upload sent with `Content-Encoding: gzip`. Neither holds more than a chunk: the
//! decoder is fed a little at a time and yields each piece it inflates (at most flate2's
//! 32 KiB buffer per step), so a small body that inflates to a lot is never held inflated.

use std::io::Write;

use axum::body::Body;
use bytes::Bytes;
use flate2::write::{GzDecoder, GzEncoder};
use flate2::Compression;
use futures_util::{Stream, StreamExt};

/// Whether an `Accept-Encoding` value asks for gzip: gzip is the only coding it accepts, as
/// the SDKs send with `gzip=True`. A client's default list (httpx's `gzip, deflate`, and
/// the like) gets identity, which every client takes: compressing a file costs the daemon
/// CPU for every download (five times the time of the transfer for 1 MiB of random bytes)
/// that the caller did not ask for.
pub fn asks_for_gzip(accept_encoding: &str) -> bool {
    let mut accepted = accept_encoding.split(',').filter_map(|item| {
        let mut parts = item.split(';').map(str::trim);
        let coding = parts.next().unwrap_or("");
        let refused = parts.any(|p| {
            matches!(
                p.replace(' ', "").as_str(),
                "q=0" | "q=0.0" | "q=0.00" | "q=0.000"
            )
        });
        (!coding.is_empty() && !refused).then_some(coding)
    });
    let is_gzip = |c: &str| c.eq_ignore_ascii_case("gzip") || c.eq_ignore_ascii_case("x-gzip");
    matches!((accepted.next(), accepted.next()), (Some(only), None) if is_gzip(only))
}

/// `chunks` gzipped, as they come.
pub fn encode<S>(chunks: S) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + Send + Unpin,
{
    let encoder = GzEncoder::new(Vec::new(), Compression::fast());
    futures_util::stream::unfold(Some((chunks, encoder)), |state| async move {
        let (mut chunks, mut encoder) = state?;
        loop {
            match chunks.next().await {
                Some(Ok(chunk)) => {
                    if let Err(error) = encoder.write_all(&chunk) {
                        return Some((Err(error), None));
                    }
                    let out = std::mem::take(encoder.get_mut());
                    if !out.is_empty() {
                        return Some((Ok(Bytes::from(out)), Some((chunks, encoder))));
                    }
                }
                Some(Err(error)) => return Some((Err(error), None)),
                None => {
                    return Some((encoder.finish().map(Bytes::from), None));
                }
            }
        }
    })
}

/// A gzipped body, inflated as it is read. A body that is not gzip fails as it is read.
pub fn decode(body: Body) -> Body {
    let state = Inflating {
        chunks: body.into_data_stream(),
        decoder: GzDecoder::new(Vec::new()),
        pending: Bytes::new(),
        done: false,
    };
    Body::from_stream(futures_util::stream::unfold(
        state,
        |mut state| async move {
            loop {
                if state.done {
                    return None;
                }
                if !state.pending.is_empty() {
                    let step = state.decoder.write(&state.pending);
                    match step {
                        Ok(used) => {
                            let _ = state.pending.split_to(used);
                            let out = std::mem::take(state.decoder.get_mut());
                            if !out.is_empty() {
                                return Some((Ok(Bytes::from(out)), state));
                            }
                            if used == 0 {
                                // The stream ended inside this chunk: the rest is not gzip.
                                state.done = true;
                                return Some((Err(trailing()), state));
                            }
                        }
                        Err(error) => {
                            state.done = true;
                            return Some((Err(error), state));
                        }
                    }
                    continue;
                }
                match state.chunks.next().await {
                    Some(Ok(chunk)) => state.pending = chunk,
                    Some(Err(error)) => {
                        state.done = true;
                        return Some((Err(std::io::Error::other(error)), state));
                    }
                    None => {
                        state.done = true;
                        let finished = state.decoder.try_finish();
                        let out = std::mem::take(state.decoder.get_mut());
                        return match finished {
                            Ok(()) if out.is_empty() => None,
                            Ok(()) => Some((Ok(Bytes::from(out)), state)),
                            Err(error) => Some((Err(error), state)),
                        };
                    }
                }
            }
        },
    ))
}

struct Inflating {
    chunks: axum::body::BodyDataStream,
    decoder: GzDecoder<Vec<u8>>,
    pending: Bytes,
    done: bool,
}

fn trailing() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "the gzip body has bytes after its end",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_encoding() {
        assert!(asks_for_gzip("gzip"));
        assert!(asks_for_gzip(" x-gzip "));
        assert!(asks_for_gzip("gzip, br;q=0"));
        assert!(!asks_for_gzip("gzip, deflate"));
        assert!(!asks_for_gzip("br, gzip;q=0.5"));
        assert!(!asks_for_gzip("gzip;q=0"));
        assert!(!asks_for_gzip("identity"));
        assert!(!asks_for_gzip(""));
    }

    #[tokio::test]
    async fn round_trip_and_a_bomb_inflates_a_piece_at_a_time() {
        let data = vec![0u8; 4 << 20];
        let input = futures_util::stream::iter([Ok(Bytes::from(data.clone()))]);
        let zipped: Vec<u8> = encode(input).map(|c| c.unwrap().to_vec()).concat().await;
        assert!(zipped.len() < 64 * 1024, "{}", zipped.len());
        let mut pieces = decode(Body::from(zipped)).into_data_stream();
        let mut total = 0;
        while let Some(piece) = pieces.next().await {
            let piece = piece.unwrap();
            assert!(piece.len() <= 64 * 1024, "{}", piece.len());
            total += piece.len();
        }
        assert_eq!(total, data.len());
    }
}
