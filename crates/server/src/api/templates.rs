//! `GET /v1/templates`, and `POST /v1/templates/reload` (admin).

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use berth_protocol::service::ServiceConfig;
use berth_runtime::Limits;
use serde::Serialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::view::redact_host_paths;
use crate::ctx::Ctx;
use crate::egress::policy::EgressPolicy;
use crate::templates::{Base, Origin, Template, TemplateError, TemplateRegistry};
use berth_runtime::error_chain;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TemplateView {
    pub name: String,
    /// `host`, `minimal`, `debian`, `debian:<suite>`, `dir:<path>` or `tarball:<path>`
    /// (a tenant sees `dir` or `tarball`, without the host path).
    pub base: String,
    /// The runtimes its base runs on (`host`: the sandbox only; an image: every one), whether
    /// or not this daemon has them (`GET /v1/runtimes`).
    pub runtimes: Vec<String>,
    /// The sleep ladder of its boxes: idle seconds before each rung (0: never; a rung a
    /// box's runtime lacks is skipped), and whether calls wake a sleeping box.
    pub pause_after_s: u64,
    pub snapshot_after_s: u64,
    pub stop_after_s: u64,
    pub auto_resume: bool,
    /// The volume size of its boxes, unless a box gives its own.
    pub disk_mib: u64,
    #[schema(value_type = crate::api::view::LimitsView)]
    pub limits: Limits,
    pub layers: Vec<LayerView>,
    pub harness: Option<HarnessView>,
    /// The daemons `berth-init` starts in its boxes before the harness (`[[services]]`,
    /// `docs/templates.md`), in the file's order; empty: none.
    pub services: Vec<ServiceConfig>,
    /// What its boxes may reach (canonical form); empty: nothing leaves.
    pub egress: EgressPolicy,
    /// Boxes kept booted for creates to claim (`docs/templates.md`, "Warm pools"); 0: none.
    pub warm: usize,
    /// `builtin`, or the template's file (a tenant sees `file`).
    pub origin: String,
    /// Why boxes cannot be made from it now; `null`: usable. Host paths in it are shown
    /// to a tenant as `<host path>`.
    pub unavailable: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LayerView {
    /// The host directory or image it comes from; `null` for a tenant (no host paths).
    pub source: Option<String>,
    pub target: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HarnessView {
    pub command: Vec<String>,
    pub resume_args: Vec<String>,
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TemplateListView {
    pub templates: Vec<TemplateView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReloadView {
    pub templates: Vec<TemplateView>,
    pub errors: Vec<TemplateErrorView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TemplateErrorView {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

impl TemplateView {
    /// The template as `admin` (everything) or a tenant (no host paths: a `dir:` or
    /// `tarball:` base shows its kind, a layer its target, a file template `file`) sees it.
    fn new(t: &Template, admin: bool) -> Self {
        let mut view = TemplateView::from(t);
        if !admin {
            view.base = match &t.base {
                Base::Dir(_) => "dir".into(),
                Base::Tarball(_) => "tarball".into(),
                other => other.to_string(),
            };
            for layer in &mut view.layers {
                layer.source = None;
            }
            if let Origin::File(_) = t.origin {
                view.origin = "file".into();
            }
            view.unavailable = view.unavailable.as_deref().map(redact_host_paths);
        }
        view
    }
}

impl From<&Template> for TemplateView {
    fn from(t: &Template) -> Self {
        TemplateView {
            name: t.name.clone(),
            base: t.base.to_string(),
            runtimes: crate::runtimes::all_runtimes()
                .filter(|r| crate::runtimes::runs_base(r, t.base.is_image()))
                .map(str::to_owned)
                .collect(),
            pause_after_s: t.sleep.pause_after_s,
            snapshot_after_s: t.sleep.snapshot_after_s,
            stop_after_s: t.sleep.stop_after_s,
            auto_resume: t.sleep.auto_resume,
            disk_mib: t.disk_mib,
            limits: t.limits,
            layers: t
                .layers
                .iter()
                .map(|l| LayerView {
                    source: Some(l.source.display().to_string()),
                    target: l.target.clone(),
                })
                .collect(),
            harness: t.harness.as_ref().map(|h| HarnessView {
                command: h.command.clone(),
                resume_args: h.resume_args.clone(),
                env: h.env.clone(),
            }),
            services: t.services.clone(),
            egress: t.egress.clone(),
            warm: t.warm,
            origin: t.origin.to_string(),
            unavailable: t.unavailable.clone(),
        }
    }
}

impl From<&TemplateError> for TemplateErrorView {
    fn from(e: &TemplateError) -> Self {
        TemplateErrorView {
            file: e.file.display().to_string(),
            line: e.line,
            message: e.message(),
        }
    }
}

fn views(registry: &TemplateRegistry, admin: bool) -> Vec<TemplateView> {
    registry
        .list()
        .iter()
        .map(|t| TemplateView::new(t, admin))
        .collect()
}

#[utoipa::path(get, path = "/v1/templates", tag = "templates", summary = "List templates", responses((status = 200, body = TemplateListView), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list(State(ctx): State<Ctx>, Caller(who): Caller) -> Json<TemplateListView> {
    Json(TemplateListView {
        templates: views(&ctx.templates.current(), who.is_admin),
    })
}

/// Re-reads `<data-dir>/templates/*.toml`; a bad file is reported (and logged) and skipped.
/// Boxes pick up the new templates at their next start.
#[utoipa::path(post, path = "/v1/templates/reload", tag = "templates", summary = "Re-read template files (admin)", responses((status = 200, body = ReloadView), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 403, description = "not an admin key", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn reload(State(ctx): State<Ctx>, caller: Caller) -> Result<Json<ReloadView>, ApiError> {
    caller.require_admin()?;
    let shared = ctx.templates.clone();
    let (registry, errors) = crate::lifecycle::detached::blocking(move || shared.reload())
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    for e in &errors {
        tracing::warn!(error = %error_chain(e), "template skipped");
    }
    tracing::info!(
        templates = registry.list().len(),
        skipped = errors.len(),
        "templates reloaded"
    );
    Ok(Json(ReloadView {
        templates: views(&registry, true),
        errors: errors.iter().map(TemplateErrorView::from).collect(),
    }))
}
