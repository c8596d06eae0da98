//! The public HTTP API (docs/api.md): routes, and the request log. `/metrics`
//! (docs/metrics.md) is served beside it, outside `/v1` and the OpenAPI description: it is
//! for Prometheus, not for the SDKs.

pub mod auth;
pub mod backup;
pub mod box_restore;
pub mod box_sleep;
pub mod box_update;
pub mod boxes;
pub mod caller_scope;
pub mod cluster_join;
pub mod desktop;
pub mod desktop_vnc;
pub mod egress;
pub mod error;
pub mod events;
pub mod exec;
pub mod extract;
pub mod files;
pub mod files_archive;
pub mod files_watch;
pub mod mcp;
pub mod memory;
pub mod memory_history;
pub mod memory_search;
pub mod messages;
pub mod metrics;
pub mod nodes;
mod old_names;
pub mod openapi;
pub mod port_links;
pub mod ports;
pub mod processes;
pub mod push;
pub mod request_id;
pub mod runtimes;
pub mod secrets;
pub mod security_headers;
pub mod send_deadline;
pub mod services;
pub mod session_cookie;
pub mod templates;
pub mod tenants;
pub mod terminal_bridge;
pub mod terminals;
pub mod view;
pub mod wakeups;
pub mod web_origin;
pub mod web_sessions;
pub mod webapp;
pub mod webhooks;
pub mod ws_bridge;

use std::time::Instant;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{any, any_service, delete, get, post};
use axum::{Json, Router};

use crate::api::error::ApiError;
use crate::ctx::Ctx;

pub fn router(ctx: Ctx) -> Router {
    // `/mcp`'s tools call the API in process: through the same routes and layers as any
    // client, in a router of their own that has no `/mcp`.
    let api = with_layers(routes(ctx.clone()), ctx.clone());
    let mcp = any_service(mcp::service(api)).layer(middleware::from_fn_with_state(
        ctx.clone(),
        mcp::authenticate,
    ));
    with_layers(routes(ctx.clone()).route(mcp::PATH, mcp), ctx)
}

/// Every route but `/mcp`.
fn routes(ctx: Ctx) -> Router<Ctx> {
    Router::new()
        .route("/", get(webapp::serve))
        .route("/index.html", get(webapp::serve))
        .route("/sw.js", get(webapp::serve))
        .route("/manifest.webmanifest", get(webapp::serve))
        .route("/icons/{*file}", get(webapp::serve))
        .route("/assets/{*file}", get(webapp::serve))
        .route("/v1/health", get(health))
        .route("/openapi.json", get(openapi_json))
        .route(metrics::PATH, get(metrics::serve))
        .route("/v1/boxes", post(boxes::create).get(boxes::list))
        .route(
            "/v1/boxes/{box_ref}",
            get(boxes::get)
                .delete(boxes::delete)
                .patch(box_update::update),
        )
        .route("/v1/boxes/{box_ref}/start", post(boxes::start))
        .route("/v1/boxes/{box_ref}/stop", post(boxes::stop))
        .route("/v1/boxes/{box_ref}/pause", post(box_sleep::pause))
        .route("/v1/boxes/{box_ref}/resume", post(box_sleep::resume))
        .route("/v1/boxes/{box_ref}/snapshot", post(box_sleep::snapshot))
        .route("/v1/boxes/{box_ref}/restore", post(box_restore::restore))
        .route("/v1/boxes/{box_ref}/backup", get(backup::backup))
        .route("/v1/backups/restore", post(backup::restore))
        .route("/v1/boxes/{box_ref}/exec", post(exec::exec))
        .route("/v1/boxes/{box_ref}/pty", get(terminals::pty))
        .route("/v1/boxes/{box_ref}/desktop/vnc", get(desktop_vnc::vnc))
        .route("/v1/boxes/{box_ref}/processes", get(processes::list))
        .route(
            "/v1/boxes/{box_ref}/processes/{id}/output",
            get(processes::output),
        )
        .route(
            "/v1/boxes/{box_ref}/processes/{id}/stdin",
            post(processes::stdin),
        )
        .route(
            "/v1/boxes/{box_ref}/processes/{id}/signal",
            post(processes::signal),
        )
        .route("/v1/boxes/{box_ref}/services", get(services::list))
        .route(
            "/v1/boxes/{box_ref}/services/{name}/logs",
            get(services::logs),
        )
        .route(
            "/v1/boxes/{box_ref}/services/{name}/restart",
            post(services::restart),
        )
        .route("/v1/boxes/{box_ref}/desktop", get(desktop::status))
        .route(
            "/v1/boxes/{box_ref}/desktop/screenshot",
            get(desktop::screenshot),
        )
        .route(
            "/v1/boxes/{box_ref}/desktop/actions",
            post(desktop::actions),
        )
        .route("/v1/boxes/{box_ref}/desktop/cursor", get(desktop::cursor))
        .route(
            "/v1/boxes/{box_ref}/files",
            get(files::read).put(files::write).delete(files::remove),
        )
        .route(
            "/v1/boxes/{box_ref}/files/archive",
            get(files_archive::read).put(files_archive::write),
        )
        .route("/v1/boxes/{box_ref}/files/watch", get(files_watch::watch))
        .route("/v1/boxes/{box_ref}/files/list", get(files::list))
        .route("/v1/boxes/{box_ref}/files/stat", get(files::stat))
        .route("/v1/boxes/{box_ref}/files/mkdir", post(files::mkdir))
        .route(
            "/v1/boxes/{box_ref}/messages",
            post(messages::post).get(messages::list),
        )
        .route("/v1/boxes/{box_ref}/memory", get(memory::tree))
        .route(
            "/v1/boxes/{box_ref}/memory/search",
            get(memory_search::search),
        )
        .route(
            "/v1/boxes/{box_ref}/memory/links",
            get(memory_search::links),
        )
        .route(
            "/v1/boxes/{box_ref}/memory/graph",
            get(memory_search::graph),
        )
        .route(
            "/v1/boxes/{box_ref}/memory/snapshots",
            get(memory_history::list).post(memory_history::take),
        )
        .route(
            "/v1/boxes/{box_ref}/memory/snapshots/{snapshot}",
            get(memory_history::get),
        )
        .route(
            "/v1/boxes/{box_ref}/memory/snapshots/{snapshot}/diff",
            get(memory_history::diff),
        )
        .route(
            "/v1/boxes/{box_ref}/memory/snapshots/{snapshot}/files/{*path}",
            get(memory_history::file),
        )
        .route(
            "/v1/boxes/{box_ref}/memory/restore",
            post(memory_history::restore),
        )
        .route("/v1/boxes/{box_ref}/memory/{*path}", get(memory::file))
        .route("/v1/boxes/{box_ref}/events", get(events::events))
        .route("/v1/boxes/{box_ref}/egress", get(egress::audit))
        .route("/v1/boxes/{box_ref}/ports", get(port_links::urls))
        .route("/v1/boxes/{box_ref}/ports/{port}", any(ports::add_slash))
        .route("/v1/boxes/{box_ref}/ports/{port}/", any(ports::by_path))
        .route(
            "/v1/boxes/{box_ref}/ports/{port}/{*path}",
            any(ports::by_path),
        )
        .route(
            "/v1/boxes/{box_ref}/ports/{port}/links",
            post(port_links::create).get(port_links::list_port),
        )
        .route(
            "/v1/boxes/{box_ref}/ports/{port}/links/{link_id}",
            delete(port_links::revoke_port),
        )
        .route("/v1/boxes/{box_ref}/links", get(port_links::list_box))
        .route(
            "/v1/boxes/{box_ref}/links/{link_id}",
            delete(port_links::revoke_box),
        )
        .route(
            "/v1/boxes/{box_ref}/wakeups",
            post(wakeups::create).get(wakeups::list),
        )
        .route(
            "/v1/boxes/{box_ref}/wakeups/{wakeup_id}",
            delete(wakeups::delete),
        )
        .route("/v1/runtimes", get(runtimes::list))
        .route("/v1/nodes", get(nodes::list))
        .route("/v1/nodes/{node}/drain", post(nodes::drain))
        .route("/v1/nodes/{node}/expunge", post(nodes::expunge))
        .route(cluster_join::PATH, post(cluster_join::join))
        .route("/v1/templates", get(templates::list))
        .route("/v1/templates/reload", post(templates::reload))
        .route("/v1/tenants", post(tenants::create).get(tenants::list))
        .route(
            "/v1/tenants/{tenant}",
            get(tenants::get).patch(tenants::update),
        )
        .route(
            "/v1/tenants/{tenant}/keys",
            get(tenants::list_keys).post(tenants::add_key),
        )
        .route(
            "/v1/tenants/{tenant}/keys/{key_id}",
            delete(tenants::revoke_key),
        )
        .route("/v1/secrets", post(secrets::set).get(secrets::list))
        .route("/v1/secrets/{name}", delete(secrets::delete))
        .route("/v1/web/pairings", post(web_sessions::pair))
        .route(
            "/v1/web/sessions",
            post(web_sessions::sign_in).get(web_sessions::list),
        )
        .route(
            "/v1/web/session",
            get(web_sessions::current).delete(web_sessions::sign_out),
        )
        .route("/v1/web/sessions/{id}", delete(web_sessions::revoke))
        .route("/v1/web/push/key", get(push::key))
        .route(
            "/v1/web/push/subscriptions",
            post(push::subscribe).get(push::list),
        )
        .route("/v1/web/push/subscriptions/{id}", delete(push::unsubscribe))
        .route("/v1/webhooks", post(webhooks::create).get(webhooks::list))
        .route(
            "/v1/webhooks/{id}",
            get(webhooks::show).delete(webhooks::delete),
        )
        .route("/v1/webhooks/{id}/test", post(webhooks::test))
        .route("/v1/webhooks/{id}/deliveries", get(webhooks::deliveries))
        .nest(
            crate::e2b::PREFIX,
            crate::e2b::router().layer(middleware::from_fn_with_state(
                ctx.clone(),
                crate::e2b::envd::by_sandbox_header,
            )),
        )
        // The SDK's signed file URLs made from E2B_SANDBOX_URL lose its `/e2b` (docs/e2b.md).
        .route("/files", get(e2b_root_files).post(e2b_root_files))
}

/// What wraps every route, and the state they share.
fn with_layers(routes: Router<Ctx>, ctx: Ctx) -> Router {
    routes
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(security_headers::add))
        // On an API replica, a call on a box goes to its node (with the caller known, by
        // key or by the session cookie read just before).
        .layer(middleware::from_fn_with_state(
            ctx.clone(),
            crate::cluster::forward::route,
        ))
        // berth's own host only: a port's host name never gets the session cookie.
        .layer(middleware::from_fn_with_state(
            ctx.clone(),
            session_cookie::read,
        ))
        // Before the routes: a port's host name goes to the port whatever its path.
        .layer(middleware::from_fn_with_state(ctx.clone(), ports::by_host))
        // On an API replica, a port's or envd's host name goes to the box's node first.
        .layer(middleware::from_fn_with_state(
            ctx.clone(),
            crate::cluster::forward::route_host,
        ))
        // A node's answers say which boot of it answered.
        .layer(middleware::from_fn_with_state(
            ctx.clone(),
            crate::cluster::forward::stamp_boot,
        ))
        .layer(middleware::from_fn(log_request))
        .with_state(ctx)
}

/// envd's `/files` at berth's root (signed URLs only: see `e2b::envd::files_http::auth`).
async fn e2b_root_files(
    axum::extract::State(ctx): axum::extract::State<Ctx>,
    request: axum::extract::Request,
) -> axum::response::Response {
    crate::e2b::envd::serve(ctx, request).await
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
struct Health {
    status: &'static str,
    version: &'static str,
}

/// The OpenAPI description of this API (no key needed).
async fn openapi_json() -> impl axum::response::IntoResponse {
    (
        [(http::header::CONTENT_TYPE, "application/json")],
        openapi::document(),
    )
}

#[utoipa::path(get, path = "/v1/health", tag = "health", summary = "Liveness (no key needed)", responses((status = 200, body = Health)))]
async fn health() -> Json<Health> {
    Json(Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
    })
}

async fn no_route(method: http::Method, uri: http::Uri) -> ApiError {
    ApiError::NoRoute {
        method,
        path: uri.path().to_owned(),
    }
}

async fn method_not_allowed(method: http::Method, uri: http::Uri) -> ApiError {
    ApiError::MethodNotAllowed {
        method,
        path: uri.path().to_owned(),
    }
}

/// Serves the request in its span ([`request_id`]: every line logged meanwhile carries its
/// id), answers with its id in `X-Request-Id`, and logs one line per request at info:
/// method, path, status, duration.
async fn log_request(mut req: Request, next: Next) -> Response {
    let id = request_id::of(req.headers());
    // Carried on: a call an API replica forwards reaches its node with the same id, so the
    // replica's lines and the node's for one request share it.
    req.headers_mut().insert(request_id::HEADER, id.clone());
    let span = request_id::span(&id);
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let began = Instant::now();
    let serve = async move {
        let response = caller_scope::scope(next.run(req)).await;
        tracing::info!(
            %method,
            path,
            status = response.status().as_u16(),
            duration_ms = %format_args!("{:.1}", began.elapsed().as_secs_f64() * 1000.0),
            "request"
        );
        response
    };
    let mut response = tracing::Instrument::instrument(serve, span).await;
    response.headers_mut().insert(request_id::HEADER, id);
    response
}
