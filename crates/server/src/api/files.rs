//! `/v1/boxes/{ref}/files…`: read, write, list, stat, mkdir, remove.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_protocol::guest::{BoxUser, FileEntry, FileList};
use http::StatusCode;
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::{ApiQuery, Upload};
use crate::ctx::Ctx;
use crate::ops::box_find;
use crate::ops::files::{self, FileTarget};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileParams {
    path: String,
    #[serde(default)]
    user: BoxUser,
    #[serde(default)]
    recursive: bool,
    #[serde(default)]
    mode: Option<u32>,
}

impl From<FileParams> for FileTarget {
    fn from(p: FileParams) -> Self {
        FileTarget {
            path: p.path,
            user: p.user,
            recursive: p.recursive,
            mode: p.mode,
        }
    }
}

pub async fn read(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<FileParams>,
) -> Result<Response, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let bytes = files::read(&ctx, &record.id, &params.into()).await?;
    Ok((
        [(http::header::CONTENT_TYPE, "application/octet-stream")],
        bytes,
    )
        .into_response())
}

pub async fn write(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<FileParams>,
    Upload(data): Upload,
) -> Result<StatusCode, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    files::write(&ctx, &record.id, &params.into(), data).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn list(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<FileParams>,
) -> Result<Json<FileList>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(files::list(&ctx, &record.id, &params.into()).await?))
}

pub async fn stat(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<FileParams>,
) -> Result<Json<FileEntry>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(files::stat(&ctx, &record.id, &params.into()).await?))
}

pub async fn mkdir(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<FileParams>,
) -> Result<StatusCode, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    files::mkdir(&ctx, &record.id, &params.into()).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn remove(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<FileParams>,
) -> Result<StatusCode, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    files::remove(&ctx, &record.id, &params.into()).await?;
    Ok(StatusCode::NO_CONTENT)
}
