//! Serving Connect calls (`berth-e2b-wire` has the encodings): unary, server-streaming and
//! client-streaming, each from a handler that knows nothing of the protocol.
//!
//! - A request's headers are checked first (codec from Content-Type, protocol version,
//!   identity encoding, `Connect-Timeout-Ms`); a Content-Type that is no Connect one is a
//!   plain `415`.
//! - Request messages are bounded by [`MAX_MESSAGE_BYTES`] as they are read: a unary body by
//!   a limited reader, an envelope by its header, before its payload is kept.
//! - Errors: a unary call's is its HTTP status and `{"code","message"}`; a streaming call's
//!   travels in the end-stream envelope of a `200`, as Connect prescribes.
//! - A server stream is pulled as the client reads (nothing is queued here); while it is
//!   quiet a keepalive message goes out at the interval the client asked for
//!   (`Keepalive-Ping-Interval`, both SDKs ask 50 s), and at the call's deadline it ends with
//!   `deadline_exceeded`.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use berth_e2b_wire::headers::{self, CONNECT_TIMEOUT_MS, KEEPALIVE_PING_INTERVAL};
use berth_e2b_wire::{
    envelope, parse_timeout, Code, Codec, ConnectError, EnvelopeDecoder, Frame, RpcKind, WireError,
    WireMessage, MAX_MESSAGE_BYTES,
};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http::{header, HeaderMap, HeaderValue, StatusCode};
use http_body_util::{BodyExt, Limited};
use tokio::time::Instant;

/// The shortest and longest keepalive interval honoured (seconds).
const KEEPALIVE_RANGE_S: (u64, u64) = (1, 3600);

/// A server stream's events, as a handler produces them.
pub type Events<M> = Pin<Box<dyn Stream<Item = Result<M, ConnectError>> + Send>>;

/// A client stream's messages, decoded as they arrive.
pub type Incoming<M> = Pin<Box<dyn Stream<Item = Result<M, ConnectError>> + Send>>;

/// What a call's headers say.
#[derive(Debug, Clone, Copy)]
struct Call {
    codec: Codec,
    deadline: Option<Instant>,
    keepalive: Option<Duration>,
}

/// Why a call is refused before it runs.
enum Refusal {
    /// Not a Connect content type for this kind of call: a plain `415`.
    MediaType(WireError),
    Connect(ConnectError),
}

impl From<WireError> for Refusal {
    fn from(error: WireError) -> Self {
        Refusal::Connect(error.into())
    }
}

fn read_call(headers: &HeaderMap, kind: RpcKind) -> Result<Call, Refusal> {
    let text = |name: &http::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let content_type = text(&header::CONTENT_TYPE).unwrap_or("");
    let codec = Codec::from_content_type(content_type, kind).map_err(Refusal::MediaType)?;
    headers::check_protocol_version(text(&headers::CONNECT_PROTOCOL_VERSION))?;
    headers::check_content_encoding(text(&kind.content_encoding_header()))?;
    let deadline = match text(&CONNECT_TIMEOUT_MS) {
        Some(value) => Some(Instant::now() + parse_timeout(value)?),
        None => None,
    };
    let keepalive = text(&KEEPALIVE_PING_INTERVAL)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| Duration::from_secs(s.clamp(KEEPALIVE_RANGE_S.0, KEEPALIVE_RANGE_S.1)));
    Ok(Call {
        codec,
        deadline,
        keepalive,
    })
}

/// Answers a call of `kind` with `error` before it ran (the caller could not be identified,
/// the method is unknown).
pub fn refuse(headers: &HeaderMap, kind: RpcKind, error: ConnectError) -> Response {
    let codec = read_call(headers, kind)
        .map(|c| c.codec)
        .unwrap_or(Codec::Json);
    match kind {
        RpcKind::Unary => unary_error(&error),
        RpcKind::Streaming => stream_answer(
            codec,
            futures_util::stream::iter([Ok(envelope::encode_end_stream(Some(&error)))]),
        ),
    }
}

/// A unary call: decodes the request, runs `handle` (bounded by the call's deadline) and
/// encodes its answer.
pub async fn unary<Req, Resp, F, Fut>(request: Request, handle: F) -> Response
where
    Req: WireMessage,
    Resp: WireMessage,
    F: FnOnce(Req) -> Fut,
    Fut: Future<Output = Result<Resp, ConnectError>>,
{
    let (parts, body) = request.into_parts();
    let call = match read_call(&parts.headers, RpcKind::Unary) {
        Ok(call) => call,
        Err(refusal) => return refused(RpcKind::Unary, Codec::Json, refusal),
    };
    let bytes = match Limited::new(body, MAX_MESSAGE_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => return unary_error(&body_error(&*error)),
    };
    let answer = async {
        let req = call.codec.decode::<Req>(&bytes)?;
        within(call.deadline, handle(req)).await
    };
    match answer.await {
        Ok(resp) => match call.codec.encode(&resp) {
            Ok(encoded) => respond(
                StatusCode::OK,
                call.codec.content_type(RpcKind::Unary),
                Body::from(encoded),
            ),
            Err(error) => unary_error(&error.into()),
        },
        Err(error) => unary_error(&error),
    }
}

/// A server-streaming call: one request message, then `handle`'s events, keepalives while
/// they are quiet, and the end-stream.
pub async fn server_stream<Req, Resp, F, Fut>(
    request: Request,
    keepalive: fn() -> Resp,
    handle: F,
) -> Response
where
    Req: WireMessage + Send + 'static,
    Resp: WireMessage + Send + 'static,
    F: FnOnce(Req) -> Fut,
    Fut: Future<Output = Result<Events<Resp>, ConnectError>>,
{
    let (parts, body) = request.into_parts();
    let call = match read_call(&parts.headers, RpcKind::Streaming) {
        Ok(call) => call,
        Err(refusal) => return refused(RpcKind::Streaming, Codec::Json, refusal),
    };
    let started = async {
        let req = one_message::<Req>(call.codec, body).await?;
        within(call.deadline, handle(req)).await
    };
    match started.await {
        Ok(events) => stream_answer(call.codec, framed(call, events, keepalive)),
        Err(error) => refused(RpcKind::Streaming, call.codec, Refusal::Connect(error)),
    }
}

/// A client-streaming call: `handle` reads the request messages as they arrive and answers
/// once.
pub async fn client_stream<Req, Resp, F, Fut>(request: Request, handle: F) -> Response
where
    Req: WireMessage + Send + 'static,
    Resp: WireMessage,
    F: FnOnce(Incoming<Req>) -> Fut,
    Fut: Future<Output = Result<Resp, ConnectError>>,
{
    let (parts, body) = request.into_parts();
    let call = match read_call(&parts.headers, RpcKind::Streaming) {
        Ok(call) => call,
        Err(refusal) => return refused(RpcKind::Streaming, Codec::Json, refusal),
    };
    let incoming = messages::<Req>(call.codec, body);
    let end = match within(call.deadline, handle(incoming)).await {
        Ok(resp) => envelope::encode_message(call.codec, &resp)
            .map(|frame| [frame, envelope::encode_end_stream(None)].concat())
            .unwrap_or_else(|error| envelope::encode_end_stream(Some(&error.into()))),
        Err(error) => envelope::encode_end_stream(Some(&error)),
    };
    stream_answer(call.codec, futures_util::stream::iter([Ok(end)]))
}

/// The request messages of a streaming body, decoded as its chunks arrive. An end-stream
/// envelope from a client, a malformed or oversized one, or a body cut inside an envelope ends
/// the stream with an error. Fused: asking again after the end is answered `None`.
fn messages<M: WireMessage + Send + 'static>(codec: Codec, body: Body) -> Incoming<M> {
    let state = (body.into_data_stream(), EnvelopeDecoder::new(), false);
    let stream = futures_util::stream::unfold(
        state,
        move |(mut chunks, mut decoder, mut done)| async move {
            loop {
                if done {
                    return None;
                }
                match decoder.next_frame() {
                    Some(Frame::Message(bytes)) => {
                        let message = codec.decode::<M>(&bytes).map_err(ConnectError::from);
                        done = message.is_err();
                        return Some((message, (chunks, decoder, done)));
                    }
                    Some(Frame::EndStream(_)) => {
                        let error = ConnectError::new(
                            Code::InvalidArgument,
                            "a request stream carried an end-stream envelope (only servers send one)",
                        );
                        return Some((Err(error), (chunks, decoder, true)));
                    }
                    None => {}
                }
                match chunks.next().await {
                    Some(Ok(chunk)) => {
                        if let Err(error) = decoder.push(&chunk) {
                            return Some((Err(error.into()), (chunks, decoder, true)));
                        }
                    }
                    Some(Err(error)) => {
                        let error = body_error(&error);
                        return Some((Err(error), (chunks, decoder, true)));
                    }
                    None => {
                        return match decoder.finish() {
                            Ok(()) => None,
                            Err(error) => Some((Err(error.into()), (chunks, decoder, true))),
                        };
                    }
                }
            }
        },
    );
    Box::pin(stream.fuse())
}

/// The single request message of a server-streaming call.
async fn one_message<M: WireMessage + Send + 'static>(
    codec: Codec,
    body: Body,
) -> Result<M, ConnectError> {
    let mut incoming = messages::<M>(codec, body);
    let first = incoming.next().await.transpose()?;
    let more = incoming.next().await.transpose()?;
    match (first, more) {
        (Some(message), None) => Ok(message),
        (None, _) => Err(ConnectError::new(
            Code::InvalidArgument,
            "the request stream carried no message",
        )),
        (Some(_), Some(_)) => Err(ConnectError::new(
            Code::InvalidArgument,
            "a server-streaming call takes exactly one request message",
        )),
    }
}

/// The response envelopes: each event, a keepalive while quiet, then the end-stream (with the
/// stream's error, or `deadline_exceeded` at the deadline).
fn framed<M: WireMessage + Send + 'static>(
    call: Call,
    events: Events<M>,
    keepalive: fn() -> M,
) -> impl Stream<Item = Result<Vec<u8>, std::convert::Infallible>> + Send {
    let state = (events, false);
    futures_util::stream::unfold(state, move |(mut events, ended)| async move {
        if ended {
            return None;
        }
        let tick = async {
            match call.keepalive {
                Some(every) => tokio::time::sleep(every).await,
                None => std::future::pending().await,
            }
        };
        let deadline = async {
            match call.deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let frame = tokio::select! {
            event = events.next() => match event {
                Some(Ok(message)) => match envelope::encode_message(call.codec, &message) {
                    Ok(frame) => return Some((Ok(frame), (events, false))),
                    Err(error) => envelope::encode_end_stream(Some(&error.into())),
                },
                Some(Err(error)) => envelope::encode_end_stream(Some(&error)),
                None => envelope::encode_end_stream(None),
            },
            () = tick => match envelope::encode_message(call.codec, &keepalive()) {
                Ok(frame) => return Some((Ok(frame), (events, false))),
                Err(error) => envelope::encode_end_stream(Some(&error.into())),
            },
            () = deadline => envelope::encode_end_stream(Some(&ConnectError::new(
                Code::DeadlineExceeded,
                "the call's Connect-Timeout-Ms passed",
            ))),
        };
        Some((Ok(frame), (events, true)))
    })
}

async fn within<T>(
    deadline: Option<Instant>,
    work: impl Future<Output = Result<T, ConnectError>>,
) -> Result<T, ConnectError> {
    match deadline {
        Some(at) => tokio::time::timeout_at(at, work).await.unwrap_or_else(|_| {
            Err(ConnectError::new(
                Code::DeadlineExceeded,
                "the call's Connect-Timeout-Ms passed",
            ))
        }),
        None => work.await,
    }
}

fn refused(kind: RpcKind, codec: Codec, refusal: Refusal) -> Response {
    match refusal {
        Refusal::MediaType(error) => {
            let mut response = respond(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "text/plain; charset=utf-8",
                Body::from(format!("{error}\n")),
            );
            response
                .headers_mut()
                .insert(header::ACCEPT, HeaderValue::from_static(accepted(kind)));
            response
        }
        Refusal::Connect(error) => match kind {
            RpcKind::Unary => unary_error(&error),
            RpcKind::Streaming => stream_answer(
                codec,
                futures_util::stream::iter([Ok(envelope::encode_end_stream(Some(&error)))]),
            ),
        },
    }
}

fn accepted(kind: RpcKind) -> &'static str {
    match kind {
        RpcKind::Unary => "application/json, application/proto",
        RpcKind::Streaming => "application/connect+json, application/connect+proto",
    }
}

fn unary_error(error: &ConnectError) -> Response {
    let mut response = respond(
        error.http_status(),
        "application/json",
        Body::from(error.unary_body()),
    );
    if error.code == Code::Unimplemented {
        response.headers_mut().insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static(headers::ACCEPTED_ENCODINGS),
        );
    }
    response
}

fn stream_answer<S>(codec: Codec, frames: S) -> Response
where
    S: Stream<Item = Result<Vec<u8>, std::convert::Infallible>> + Send + 'static,
{
    respond(
        StatusCode::OK,
        codec.content_type(RpcKind::Streaming),
        Body::from_stream(frames.map(|frame| frame.map(Bytes::from))),
    )
}

fn respond(status: StatusCode, content_type: &'static str, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A request body that failed to arrive, or was longer than a message may be.
fn body_error(error: &(dyn std::error::Error + 'static)) -> ConnectError {
    if error.is::<http_body_util::LengthLimitError>() {
        return WireError::MessageTooLarge {
            len_bytes: MAX_MESSAGE_BYTES as u64 + 1,
            limit_bytes: MAX_MESSAGE_BYTES,
        }
        .into();
    }
    ConnectError::new(
        Code::Canceled,
        format!("the request body did not arrive: {error}"),
    )
}
