//! `GET /metrics`: the Prometheus exposition ([`crate::metrics`]), for an admin API key
//! only (it names tenants and their use): none is 401, any other caller 403, in the API's
//! error shape.

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::ctx::Ctx;
use crate::metrics::exposition::CONTENT_TYPE;

pub const PATH: &str = "/metrics";

pub async fn serve(State(ctx): State<Ctx>, caller: Caller) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let text = ctx
        .metrics
        .render(&ctx.store, ctx.egress.counters(), &ctx.streams)
        .map_err(crate::error::OpError::from)?;
    Ok(([(http::header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response())
}
