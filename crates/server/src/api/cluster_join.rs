//! `POST /v1/cluster/join`: a new node's one-time token and certificate request, answered
//! with its certificate by an API replica (the only holder of the cluster CA). No API key:
//! the token is the proof, spent by the first join that presents it. Not in the OpenAPI
//! description, like `/metrics`: it is for `berth node`, not for SDKs.

use axum::extract::State;
use axum::Json;

use crate::api::error::ApiError;
use crate::cluster::join::{self, JoinRequest, JoinResponse};
use crate::ctx::Ctx;
use crate::error::OpError;

pub const PATH: &str = "/v1/cluster/join";

pub async fn join(
    State(ctx): State<Ctx>,
    Json(request): Json<JoinRequest>,
) -> Result<Json<JoinResponse>, ApiError> {
    let Some(api) = ctx.role.api() else {
        return Err(ApiError::NoRoute {
            method: http::Method::POST,
            path: format!(
                "{PATH} (only a cluster's API replica, `berth up --role api`, answers joins)"
            ),
        });
    };
    let store = ctx.store.clone();
    let tls = api.nodes.tls();
    let answer = tokio::task::spawn_blocking(move || join::answer(tls.ca(), &store, &request))
        .await
        .expect("a join does not panic");
    match answer {
        Ok(answer) => {
            tracing::info!("a node joined the cluster");
            Ok(Json(answer))
        }
        Err(e) => Err(OpError::Join(Box::new(e)).into()),
    }
}
