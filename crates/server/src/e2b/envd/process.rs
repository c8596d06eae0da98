//! `process.Process`: not served yet.

use axum::extract::{Path, Request};
use axum::response::Response;
use berth_e2b_wire::RpcKind;

/// Every method of `process.Process`.
pub async fn serve(Path(method): Path<String>, request: Request) -> Response {
    let error = super::no_method("process.Process", &method);
    super::connect_serve::refuse(request.headers(), RpcKind::Unary, error)
}
