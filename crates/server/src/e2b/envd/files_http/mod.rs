//! envd's `/files` (`spec/envd/envd.yaml`): `GET` downloads a file, `POST` uploads one or
//! more, on berth's own file operations (`ops::files`), as the `username` of the query.
//!
//! - Who: [`auth`] (the access token, or a signed URL).
//! - Download: streamed from the box as it reads (never held whole), gzipped on the way when
//!   the client accepts it ([`gzip`]); holds one of the tenant's streams while it flows.
//! - Upload: `application/octet-stream` (the body is the file, `path` from the query) or
//!   `multipart/form-data` ([`multipart`]: each part a file, its path the query's `path`
//!   or the part's file name); a gzipped body (`Content-Encoding: gzip`) is inflated as it
//!   is read. Missing parent directories are made, as envd does. Each upload takes one of
//!   the tenant's upload slots (`admission::UPLOADS`), before its body is read.
//! - Errors: envd's `{"code": <status>, "message": …}`.

mod auth;
mod gzip;
mod multipart;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_protocol::guest::WriteMode;
use http::{header, HeaderValue, StatusCode};
use serde::Serialize;

use crate::api::error::ApiError;
use crate::ctx::Ctx;
use crate::e2b::envd::caller::{CallerError, EnvdCaller};
use crate::e2b::envd::filesystem::paths::{base_name, parent, resolve};
use crate::error::OpError;
use crate::ops::files::{self, FileTarget};
use auth::Operation;

/// The query of `/files`.
#[derive(Debug, Default)]
pub struct FilesQuery {
    pub path: Option<String>,
    pub username: Option<String>,
    pub signature: Option<String>,
    pub signature_expiration: Option<i64>,
}

impl FilesQuery {
    /// The query's parameters; others are ignored, as envd ignores them.
    fn parse(query: Option<&str>) -> Result<FilesQuery, FilesError> {
        let mut parsed = FilesQuery::default();
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let value = value.into_owned();
            match key.as_ref() {
                "path" => parsed.path = Some(value),
                "username" => parsed.username = Some(value),
                "signature" => parsed.signature = Some(value),
                "signature_expiration" => {
                    let at = value.parse().map_err(|_| {
                        FilesError::BadRequest(format!(
                            "signature_expiration {value:?} is not a number of seconds"
                        ))
                    })?;
                    parsed.signature_expiration = Some(at);
                }
                _ => {}
            }
        }
        Ok(parsed)
    }
}

/// Why a `/files` request failed, with envd's status for it.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("{0}")]
    BadRequest(String),
    #[error(transparent)]
    Caller(CallerError),
    #[error(transparent)]
    Op(#[from] OpError),
    #[error(transparent)]
    Api(ApiError),
    #[error("{0}")]
    Internal(String),
}

/// envd's HTTP error body.
#[derive(Debug, Serialize)]
struct ErrorBody {
    code: u16,
    message: String,
}

impl IntoResponse for FilesError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            FilesError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, self.to_string()),
            FilesError::BadRequest(message) => (StatusCode::BAD_REQUEST, message),
            FilesError::Caller(CallerError::Api(api)) => api_answer(api),
            FilesError::Caller(CallerError::Lookup(error)) => {
                tracing::error!(error = %berth_runtime::error_chain(&error), "envd /files: finding a sandbox failed");
                (StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
            }
            FilesError::Caller(other) => (StatusCode::BAD_REQUEST, other.to_string()),
            FilesError::Op(op) => api_answer(op.into()),
            FilesError::Api(api) => api_answer(api),
            FilesError::Internal(message) => {
                tracing::error!(%message, "envd /files failed");
                (StatusCode::INTERNAL_SERVER_ERROR, message)
            }
        };
        let body = ErrorBody {
            code: status.as_u16(),
            message,
        };
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::TOO_MANY_REQUESTS {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// The status and words berth's API would answer `error` with.
fn api_answer(error: ApiError) -> (StatusCode, String) {
    let (status, _) = error.status_and_code();
    if status.is_server_error() {
        tracing::error!(status = status.as_u16(), error = %berth_runtime::error_chain(&error), "envd /files failed");
    }
    (status, error.message(status))
}

/// One written file, as envd answers an upload (`EntryInfo` of envd.yaml).
#[derive(Debug, Serialize)]
pub struct Written {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub path: String,
}

fn file_target(caller: &EnvdCaller, path: String, recursive: bool) -> FileTarget {
    FileTarget {
        path,
        user: caller.user,
        recursive,
        mode: None,
    }
}

/// The path of the query, resolved for the caller (`~`, relative to the home).
fn query_path(query_path: &str, caller: &EnvdCaller) -> Result<String, FilesError> {
    resolve(query_path, caller.user).map_err(|e| FilesError::BadRequest(e.message))
}

/// `GET /files?path=&username=`: the file's bytes.
pub async fn download(State(ctx): State<Ctx>, request: Request) -> Response {
    match serve_download(&ctx, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn serve_download(ctx: &Ctx, request: Request) -> Result<Response, FilesError> {
    let (mut parts, _body) = request.into_parts();
    let query = FilesQuery::parse(parts.uri.query())?;
    let caller = auth::authorize(ctx, &mut parts, &query, Operation::Read)?;
    let path = query_path(query.path.as_deref().unwrap_or(""), &caller)?;
    let slot = ctx.streams.take(&caller.sandbox.tenant)?;
    let read = files::read(
        ctx,
        &caller.sandbox.box_id,
        &file_target(&caller, path, false),
    )
    .await?;
    let len = read.download.size_bytes();
    let bytes = Box::pin(crate::api::files::chunks(read));
    let gzip = parts
        .headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(gzip::asks_for_gzip);
    let mut response = match gzip {
        true => Response::new(Body::from_stream(slot.holding(gzip::encode(bytes)))),
        false => Response::new(Body::from_stream(slot.holding(bytes))),
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    match (gzip, len) {
        (true, _) => {
            headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        (false, Some(len)) => {
            headers.insert(header::CONTENT_LENGTH, len.into());
        }
        (false, None) => {}
    }
    Ok(response)
}

/// `POST /files?path=&username=`: writes the body (octet-stream) or each part (multipart);
/// answers the written files.
pub async fn upload(State(ctx): State<Ctx>, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let admitted = match admit_upload(&ctx, &mut parts) {
        Ok(admitted) => admitted,
        Err(error) => {
            // A client streams its body while it waits for the answer: reading some of it
            // first lets it see the refusal rather than a reset (as envd's Go server does).
            if !matches!(error, FilesError::Api(ApiError::PayloadTooLarge { .. })) {
                discard_some(body).await;
            }
            return error.into_response();
        }
    };
    match write_upload(&ctx, admitted, &parts, body).await {
        Ok(written) => Json(written).into_response(),
        Err(error) => error.into_response(),
    }
}

/// Of a refused upload's body, what is read and dropped at most before the answer, and for
/// how long: enough for the uploads a program makes in one go (envd's Go server reads
/// 256 KiB, then waits for the client to read the answer before it closes).
const DISCARD_BYTES: u64 = 8 * 1024 * 1024;
const DISCARD_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads and drops `body` up to its end, [`DISCARD_BYTES`] or [`DISCARD_TIME`]: nothing is
/// kept, and a client that sends more or slower is cut off as before.
async fn discard_some(body: Body) {
    use http_body_util::BodyExt as _;
    let mut body = body;
    let mut read = 0u64;
    let _ = tokio::time::timeout(DISCARD_TIME, async {
        while read <= DISCARD_BYTES {
            match body.frame().await {
                Some(Ok(frame)) => {
                    read += frame.data_ref().map_or(0, |d| d.len() as u64);
                }
                _ => return,
            }
        }
    })
    .await;
}

/// An upload let in: its caller, query and upload slot.
struct Admitted {
    caller: EnvdCaller,
    query: FilesQuery,
    _slot: crate::admission::Slot,
}

/// Everything decided before a byte of the body is read: who, where, how big, and one of
/// the tenant's upload slots.
fn admit_upload(ctx: &Ctx, parts: &mut http::request::Parts) -> Result<Admitted, FilesError> {
    let query = FilesQuery::parse(parts.uri.query())?;
    let caller = auth::authorize(ctx, parts, &query, Operation::Write)?;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > crate::api::extract::UPLOAD_LIMIT_BYTES) {
        return Err(FilesError::Api(ApiError::PayloadTooLarge {
            limit_bytes: crate::api::extract::UPLOAD_LIMIT_BYTES,
        }));
    }
    let slot = ctx.uploads.take(&caller.sandbox.tenant)?;
    Ok(Admitted {
        caller,
        query,
        _slot: slot,
    })
}

async fn write_upload(
    ctx: &Ctx,
    admitted: Admitted,
    parts: &http::request::Parts,
    body: Body,
) -> Result<Vec<Written>, FilesError> {
    let Admitted { caller, query, .. } = &admitted;
    let body = match parts
        .headers
        .get(header::CONTENT_ENCODING)
        .map(HeaderValue::as_bytes)
    {
        None | Some(b"identity") => body,
        Some(b"gzip") | Some(b"x-gzip") => gzip::decode(body),
        Some(other) => {
            return Err(FilesError::BadRequest(format!(
                "unsupported Content-Encoding {:?}: gzip or identity",
                String::from_utf8_lossy(other)
            )))
        }
    };
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with("multipart/form-data") {
        return multipart::upload(ctx, caller, query, content_type, body).await;
    }
    let Some(path) = query.path.as_deref() else {
        return Err(FilesError::BadRequest(
            "an application/octet-stream upload needs the path query parameter".to_owned(),
        ));
    };
    let path = query_path(path, caller)?;
    Ok(vec![write_one(ctx, caller, path, body, true).await?])
}

/// Writes one file at `path` (absolute), making its missing parents first unless
/// `make_parents` is false (the upload made them for an earlier file).
async fn write_one<B>(
    ctx: &Ctx,
    caller: &EnvdCaller,
    path: String,
    body: B,
    make_parents: bool,
) -> Result<Written, FilesError>
where
    B: axum::body::HttpBody<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<berth_runtime::guest_client::BodyError>,
{
    let id = &caller.sandbox.box_id;
    if make_parents {
        files::mkdir(ctx, id, &file_target(caller, parent(&path), true)).await?;
    }
    // In place, as envd writes: a watch of the directory sees the name written.
    let target = file_target(caller, path.clone(), false);
    files::write(ctx, id, &target, WriteMode::InPlace, body).await?;
    Ok(Written {
        name: base_name(&path),
        kind: "file",
        path,
    })
}
