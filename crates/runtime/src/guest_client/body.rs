//! Bodies to and from the agent, each with a bound: answers are collected only up to a
//! limit, a file is streamed and cut at the length the agent announced (or at
//! [`MAX_FILE_BYTES`]), and an upload streams its source body with backpressure.

use berth_protocol::guest::MAX_FILE_BYTES;
use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;

use super::error::{BodyError, GuestError};

/// Every request body on the channel: a buffer, or an upload streamed from the client.
pub(super) type RequestBody = UnsyncBoxBody<Bytes, BodyError>;

pub(super) fn full(bytes: Bytes) -> RequestBody {
    UnsyncBoxBody::new(http_body_util::Full::new(bytes).map_err(|never| match never {}))
}

/// The `Content-Length` of an answer, if it has a valid one.
fn announced(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Reads a whole answer body of at most `limit` bytes; more is [`GuestError::TooLong`],
/// noticed from the announced length before reading anything, or as soon as it is passed.
pub(super) async fn collect_limited(
    response: http::Response<Incoming>,
    limit: usize,
    what: &'static str,
) -> Result<Bytes, GuestError> {
    let too_long = GuestError::TooLong {
        what,
        limit_bytes: limit as u64,
    };
    if announced(response.headers()).is_some_and(|n| n > limit as u64) {
        return Err(too_long);
    }
    let mut body = response.into_body();
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            if buf.len() + data.len() > limit {
                return Err(too_long);
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(buf))
}

/// A file's bytes as the agent sends them. Never more than the length it announced, nor
/// than [`MAX_FILE_BYTES`] when it announced none; a body that ends before its announced
/// length is an error (hyper's), so a cut file never passes for a whole one.
pub struct FileDownload {
    len: Option<u64>,
    limit: u64,
    received: u64,
    body: Incoming,
}

impl FileDownload {
    pub(super) fn new(response: http::Response<Incoming>) -> Result<Self, GuestError> {
        let len = announced(response.headers());
        if len.is_some_and(|n| n > MAX_FILE_BYTES) {
            return Err(GuestError::TooLong {
                what: "file",
                limit_bytes: MAX_FILE_BYTES,
            });
        }
        Ok(FileDownload {
            len,
            limit: len.unwrap_or(MAX_FILE_BYTES),
            received: 0,
            body: response.into_body(),
        })
    }

    /// A stream with no length and no limit of its own (a tar of a whole tree, which the
    /// box's volume bounds): still read a chunk at a time, never held whole.
    pub(super) fn unbounded(response: http::Response<Incoming>) -> Self {
        FileDownload {
            len: None,
            limit: u64::MAX,
            received: 0,
            body: response.into_body(),
        }
    }

    /// The file's size when the agent opened it, if it said.
    pub fn size_bytes(&self) -> Option<u64> {
        self.len
    }

    /// The next piece of the file, or `None` at its end.
    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>, GuestError> {
        while let Some(frame) = self.body.frame().await {
            let Ok(data) = frame?.into_data() else {
                continue;
            };
            self.received += data.len() as u64;
            if self.received > self.limit {
                return Err(GuestError::TooLong {
                    what: "file",
                    limit_bytes: self.limit,
                });
            }
            return Ok(Some(data));
        }
        Ok(None)
    }
}

/// A request on an open connection to the agent, waiting for its streamed body: a file's
/// `PUT`, a process's stdin.
pub struct Upload {
    pub(super) sender: SendRequest<RequestBody>,
    pub(super) request: http::request::Builder,
    /// The most bytes the body may carry: [`MAX_FILE_BYTES`] for a file; none for stdin.
    pub(super) limit: Option<u64>,
}

impl Upload {
    /// Streams `body` to the agent as hyper asks for it (the source is read only as fast as
    /// the guest takes it), cut with an error past the limit.
    pub async fn send<B>(self, body: B) -> Result<(), GuestError>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BodyError>,
    {
        self.send_answered(body).await.map(drop)
    }

    /// Like [`Upload::send`], returning the agent's (successful) answer to read.
    pub(super) async fn send_answered<B>(
        mut self,
        body: B,
    ) -> Result<http::Response<Incoming>, GuestError>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BodyError>,
    {
        let body = match self.limit {
            Some(limit) => UnsyncBoxBody::new(Limited::new(
                body,
                usize::try_from(limit).unwrap_or(usize::MAX),
            )),
            None => UnsyncBoxBody::new(body.map_err(Into::into)),
        };
        let request = self
            .request
            .body(body)
            .expect("a request built from a valid method and path");
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| upload_error(e, self.limit))?;
        super::check_status(response).await
    }
}

/// A failed upload: the source body's own failure (over the limit, or broken) is told apart
/// from the channel's.
fn upload_error(err: hyper::Error, limit: Option<u64>) -> GuestError {
    let over_limit = std::error::Error::source(&err)
        .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
    if let (true, Some(limit_bytes)) = (over_limit, limit) {
        return GuestError::UploadTooLarge { limit_bytes };
    }
    if err.is_user() {
        return GuestError::UploadBody(Box::new(err));
    }
    GuestError::Http(err)
}
