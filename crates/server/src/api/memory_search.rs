//! `/v1/boxes/{ref}/memory/search|links|graph`: finding things in a box's memory
//! (`memory::search`), without waking it.

use axum::extract::{Path, State};
use axum::Json;
use berth_protocol::memory_search::{
    MemoryGraph, MemoryLinks, MemorySearchResults, MAX_SEARCH_LIMIT,
};
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::ApiQuery;
use crate::ctx::Ctx;
use crate::error::OpError;
use crate::memory::search;
use crate::ops::box_find;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    q: String,
    /// 1–100.
    #[serde(default = "default_limit")]
    limit: usize,
}

fn default_limit() -> usize {
    20
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/memory/search", tag = "memory", summary = "Search a box's memory", description = "Full-text search of `/memory`, best first (BM25 over the files' text and path words; accents folded), each hit with a snippet and the byte ranges in it that matched. A stopped box is searched in the index its last stop brought up to date, without waking it; a running box's index first takes in the files that changed.", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("q" = String, Query, description = "the words to find"), ("limit" = Option<usize>, Query, minimum = 1, maximum = 100, description = "most hits, 1–100 (default 20)")), responses((status = 200, body = MemorySearchResults), (status = 400, description = "no words in `q`, or `limit` outside 1–100", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn search(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<SearchParams>,
) -> Result<Json<MemorySearchResults>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    if !(1..=MAX_SEARCH_LIMIT).contains(&params.limit) {
        return Err(OpError::BadSearchLimit {
            limit: params.limit,
            max: MAX_SEARCH_LIMIT,
        }
        .into());
    }
    Ok(Json(
        search::search(&ctx, &record.id, &params.q, params.limit).await?,
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinksParams {
    path: String,
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/memory/links", tag = "memory", summary = "A memory file's links and backlinks", description = "The `[[links]]` a file of `/memory` makes (each with the file it resolves to: `[[name]]` is `entities/name.md` unless a file of that path exists) and the files whose links lead to it.", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("path" = String, Query, description = "a file below `/memory` (e.g. `entities/alice.md`)")), responses((status = 200, body = MemoryLinks), (status = 400, description = "invalid path", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box, or no such file in its memory", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn links(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<LinksParams>,
) -> Result<Json<MemoryLinks>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(search::links(&ctx, &record.id, &params.path).await?))
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/memory/graph", tag = "memory", summary = "A box's memory as a graph of links", description = "Every file of `/memory` and every `[[link]]` between them; a link to a file that does not exist yet is a node with `exists: false`.", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 200, body = MemoryGraph), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn graph(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Json<MemoryGraph>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(search::graph(&ctx, &record.id).await?))
}
