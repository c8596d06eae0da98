//! `filesystem.Filesystem`: not served yet.

use axum::extract::{Path, Request};
use axum::response::Response;
use berth_e2b_wire::RpcKind;

/// Every method of `filesystem.Filesystem`.
pub async fn serve(Path(method): Path<String>, request: Request) -> Response {
    let error = super::no_method("filesystem.Filesystem", &method);
    super::connect_serve::refuse(request.headers(), RpcKind::Unary, error)
}
