//! E2B's API on berth (docs/e2b.md), under `/e2b`: the official E2B SDKs, pointed at berth
//! with `E2B_API_URL`, `E2B_SANDBOX_URL` and `E2B_API_KEY`, drive berth boxes unmodified.
//!
//! This is the control plane: a sandbox is a berth box (named by its sandbox id, labelled
//! `e2b=true`, made by `ops::box_create` and started, paused and deleted by the box's
//! lifecycle owner like any box), plus a row of what only E2B knows of it
//! (`berth_store::E2bSandbox`: metadata, template name, lifetime). Nothing here bypasses
//! berth: the caller is any berth API key in `X-API-KEY` and sees only its tenant's
//! sandboxes; quotas, connection charges and the box state machine are berth's.
//!
//! - [`handlers`]: routes' handlers, each calling one operation: [`create`], [`connect`]
//!   (and resume), [`pause`], [`timeout`], [`kill`], [`list`], [`metrics`].
//! - [`lifetime`]: the task that kills (or pauses) sandboxes at their timeout.
//! - [`access_token`]: the `envdAccessToken` each sandbox gets, for the in-sandbox API.
//! - [`wire`] and [`view`]: E2B's JSON; [`error`]: E2B's error body and retry hints.

pub mod access_key;
pub mod access_token;
mod connect;
mod create;
pub mod envd;
pub mod error;
mod handlers;
mod kill;
pub mod lifetime;
mod list;
pub mod lookup;
mod metadata;
mod metrics;
mod pause;
pub mod request;
pub mod state;
mod timeout;
pub mod view;
pub mod wire;

use axum::routing::{get, post, put};
use axum::Router;

use crate::ctx::Ctx;

/// The envd version sandboxes report: the E2B SDKs switch features on it
/// (`e2b/envd/versions.py` of the pinned Python SDK, 2.63.0), so it names the newest envd
/// whose features berth's in-sandbox API has. What each version turns on in the SDK:
/// - below 0.1.0 the SDK refuses the sandbox ("update the template");
/// - 0.1.4 recursive `watch_dir`; 0.1.5 `get_metrics` (below: refused); 0.2.4 disk metrics
///   (below: a warning);
/// - 0.3.0 `commands.run(stdin=False)` (below: refused);
/// - 0.4.0 a default user: below it the SDK names `user` on every call;
/// - 0.5.2 closing a command's stdin (`close_stdin`, below: refused);
/// - 0.5.7 file uploads as `application/octet-stream` (below: multipart only);
/// - 0.6.2 file metadata on write; 0.6.3 entry info in watch events; 0.6.4 watching
///   network mounts (each refused below its version).
pub const ENVD_VERSION: &str = "0.5.7";

/// `clientID` of every sandbox (E2B has deprecated it; the SDKs still require it).
pub const CLIENT_ID: &str = "berth";

/// The longest timeout a sandbox may be given: 24 hours, E2B's longest.
pub const MAX_TIMEOUT_S: u64 = 24 * 60 * 60;

/// Now, Unix milliseconds: the clock of sandbox lifetimes.
pub fn now_ms() -> i64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

/// Where berth serves the E2B API: `E2B_API_URL` is berth's URL with this path.
pub const PREFIX: &str = "/e2b";

/// The control plane's routes, to be nested under [`PREFIX`]. Every answer, errors and unknown
/// routes included, is E2B's JSON.
pub fn router() -> Router<Ctx> {
    use handlers as h;
    Router::new()
        .route("/health", get(h::health))
        .route("/sandboxes", get(h::list_v1).post(h::create_v1))
        .route("/v2/sandboxes", get(h::list_v2).post(h::create_v2))
        .route("/sandboxes/metrics", get(h::sandboxes_metrics))
        .route("/sandboxes/{id}", get(h::info).delete(h::kill))
        .route("/sandboxes/{id}/metrics", get(h::sandbox_metrics))
        .route("/sandboxes/{id}/connect", post(h::connect_v1))
        .route("/v2/sandboxes/{id}/connect", post(h::connect_v2))
        .route("/sandboxes/{id}/resume", post(h::resume))
        .route("/sandboxes/{id}/pause", post(h::pause))
        .route("/sandboxes/{id}/timeout", post(h::set_timeout))
        .route("/sandboxes/{id}/fork", post(h::fork))
        .route("/sandboxes/{id}/snapshots", post(h::snapshots))
        .route("/snapshots", get(h::snapshots))
        .route("/sandboxes/{id}/logs", get(h::logs))
        .route("/v2/sandboxes/{id}/logs", get(h::logs))
        .route("/sandboxes/{id}/network", put(h::network))
        .route("/sandboxes/{id}/refreshes", post(h::refreshes))
        .fallback(h::no_route)
        .method_not_allowed_fallback(h::method_not_allowed)
}
