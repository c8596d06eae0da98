//! An API replica's routing: a call on a box (exec, files, terminals, processes, ports,
//! events, envd) goes to the box's node, over mutually authenticated TLS, as the client
//! sent it. The node answers it with the same API a single host has, checking the
//! client's key or session against the shared database itself, so a replica adds no trust
//! of its own: it only knows where the box lives. Clients never name a node.
//!
//! What a replica answers itself: everything not on one box, and on a box its row (`GET`),
//! the lifecycle verbs (ops, `cluster::remote`), messages and wakeups (rows in the
//! database, which stays the one place exactly-once is decided).

use axum::extract::{FromRequestParts, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use berth_store::NodeRoute;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::cluster::node_client::BOOT_HEADER;
use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ports::host::{match_host, HostMatch};

/// The sub-resources of `/v1/boxes/{ref}/` a replica serves itself.
const LOCAL: &[&str] = &[
    "start", "stop", "pause", "resume", "snapshot", "messages", "wakeups",
];

/// Middleware of a node: stamps every answer with this boot's id.
pub async fn stamp_boot(State(ctx): State<Ctx>, request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    if let Some(node) = ctx.role.node() {
        if let Ok(value) = http::HeaderValue::from_str(&node.boot_id) {
            response.headers_mut().insert(BOOT_HEADER, value);
        }
    }
    response
}

/// Middleware of an API replica: forwards a call on a box to its node, and lets
/// everything else through to this replica's own routes.
pub async fn route(State(ctx): State<Ctx>, request: Request, next: Next) -> Response {
    let Some(api) = ctx.role.api() else {
        return next.run(request).await;
    };
    let (mut parts, body) = request.into_parts();
    let node = match node_for(&ctx, &mut parts).await {
        Ok(Some(node)) => node,
        Ok(None) => return next.run(Request::from_parts(parts, body)).await,
        Err(e) => return e.into_response(),
    };
    match api
        .nodes
        .send(&node, Request::from_parts(parts, body))
        .await
    {
        Ok(answer) => answer,
        Err(e) => ApiError::Op(e).into_response(),
    }
}

/// Middleware of an API replica, before the port host names are served: a request at a
/// box's port host name (`<port>-<box>.<base_domain>`) or at an E2B sandbox's envd host
/// name goes to the box's node.
pub async fn route_host(State(ctx): State<Ctx>, request: Request, next: Next) -> Response {
    let Some(api) = ctx.role.api() else {
        return next.run(request).await;
    };
    let host = request
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let HostMatch::Port(port_host) = match_host(host, ctx.ports.base_domain.as_deref()) else {
        return next.run(request).await;
    };
    let record = if crate::api::ports::is_envd(&ctx, &port_host) {
        ctx.store
            .e2b_sandbox_on_host(&port_host.box_name)
            .ok()
            .flatten()
            .and_then(|sandbox| ctx.store.get_box(&sandbox.box_id).ok().flatten())
    } else {
        crate::api::ports::host_box(&ctx, &port_host, &request)
    };
    let Some(node_id) = record.and_then(|record| record.node_id) else {
        return next.run(request).await;
    };
    match reachable(&ctx, &node_id) {
        Ok(node) => match api.nodes.send(&node, request).await {
            Ok(answer) => answer,
            Err(e) => ApiError::Op(e).into_response(),
        },
        Err(e) => e.into_response(),
    }
}

/// The node a request must go to; `None`: this replica answers it (a 401 included).
async fn node_for(
    ctx: &Ctx,
    parts: &mut http::request::Parts,
) -> Result<Option<NodeRoute>, ApiError> {
    let node_id = if let Some(sandbox) = crate::e2b::envd::caller::sandbox_id(parts) {
        // envd's calls prove themselves with the sandbox's token, on the node.
        let Some(sandbox) = ctx
            .store
            .e2b_sandbox_on_host(&sandbox)
            .map_err(OpError::from)?
        else {
            return Ok(None);
        };
        ctx.store
            .get_box(&sandbox.box_id)
            .map_err(OpError::from)?
            .and_then(|record| record.node_id)
    } else {
        let Some(reference) =
            forwarded_box(&parts.method, parts.uri.path()).map(berth_basics::percent_decode)
        else {
            return Ok(None);
        };
        let Ok(Caller(principal)) = Caller::from_request_parts(parts, ctx).await else {
            return Ok(None);
        };
        match crate::ops::box_find::find_box(ctx, &principal.tenant_id, &reference) {
            Ok(record) => record.node_id,
            Err(OpError::BoxNotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    };
    match node_id {
        Some(node_id) => reachable(ctx, &node_id).map(Some),
        None => Ok(None),
    }
}

/// Node `node_id`'s route, while its lease runs.
fn reachable(ctx: &Ctx, node_id: &str) -> Result<NodeRoute, ApiError> {
    let node = ctx
        .store
        .node_route(node_id)
        .map_err(OpError::from)?
        .ok_or_else(|| OpError::NodeUnavailable {
            node: node_id.to_owned(),
            reason: "it is not registered".into(),
        })?;
    if !node.live() {
        return Err(OpError::NodeUnavailable {
            reason: format!("its lease ran out {} ms ago", node.lapsed_ms),
            node: node.name,
        }
        .into());
    }
    Ok(node)
}

/// The box reference of a call its node must answer: `/v1/boxes/{ref}/<sub>…` where
/// `<sub>` is not one of [`LOCAL`], or `PATCH /v1/boxes/{ref}` (a change may reach the
/// running box).
fn forwarded_box<'a>(method: &http::Method, path: &'a str) -> Option<&'a str> {
    let rest = path.strip_prefix("/v1/boxes/")?;
    match rest.split_once('/') {
        Some((reference, sub)) => {
            let first = sub.split('/').next().unwrap_or("");
            (!reference.is_empty() && !LOCAL.contains(&first)).then_some(reference)
        }
        None => (method == http::Method::PATCH && !rest.is_empty()).then_some(rest),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_on_a_box_go_to_its_node_and_the_rest_stay() {
        let get = http::Method::GET;
        for (path, to_node) in [
            ("/v1/boxes/alice/exec", Some("alice")),
            ("/v1/boxes/alice/files", Some("alice")),
            ("/v1/boxes/alice/pty", Some("alice")),
            ("/v1/boxes/alice/events", Some("alice")),
            ("/v1/boxes/alice/ports/8000/x", Some("alice")),
            ("/v1/boxes/alice/messages", None),
            ("/v1/boxes/alice/start", None),
            ("/v1/boxes/alice/wakeups/w1", None),
            ("/v1/boxes/alice", None),
            ("/v1/boxes", None),
            ("/v1/boxes/", None),
            ("/v1/templates", None),
        ] {
            assert_eq!(forwarded_box(&get, path), to_node, "{path}");
        }
        assert_eq!(
            forwarded_box(&http::Method::PATCH, "/v1/boxes/alice"),
            Some("alice")
        );
    }
}
