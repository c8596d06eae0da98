//! A node's plain-HTTP status listener, for what watches it from outside the cluster's
//! mutual TLS (a Kubernetes probe, a Nomad check, Prometheus): `GET /v1/health` is `200`
//! while the node holds its lease, `503` with the reason while it has lost the database;
//! `GET /metrics` is the node's exposition, for an admin key as everywhere. Nothing else
//! is served here.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use http::StatusCode;
use tokio::net::TcpListener;

use crate::ctx::Ctx;

pub fn spawn(listener: TcpListener, ctx: Ctx) -> tokio::task::JoinHandle<()> {
    let app = Router::new()
        .route("/v1/health", get(health))
        .route(crate::api::metrics::PATH, get(crate::api::metrics::serve))
        .with_state(ctx);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the node's health listener stopped");
        }
    })
}

async fn health(State(ctx): State<Ctx>) -> (StatusCode, Json<serde_json::Value>) {
    let Some(node) = ctx.role.node() else {
        return (StatusCode::OK, Json(serde_json::json!({"status": "ok"})));
    };
    if node.fenced() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({
                "status": "fenced",
                "node": node.name,
                "reason": "the node cannot renew its lease in the database: it takes no ops",
            })),
        );
    }
    (
        StatusCode::OK,
        Json(
            serde_json::json!({"status": "ok", "node": node.name, "version": env!("CARGO_PKG_VERSION")}),
        ),
    )
}
