//! Share links to a box's port: `POST/GET /v1/boxes/{ref}/ports/{port}/links`,
//! `DELETE …/links/{id}`, and the box's links across ports at `/v1/boxes/{ref}/links`.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_store::{BoxRecord, PortLink};
use http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::ApiJson;
use crate::ctx::Ctx;
use crate::ops::port_connect::parse_port;
use crate::ops::port_links;
use crate::ports::{cookie, host};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreatePortLink)]
pub struct CreateBody {
    /// How long the link opens the port, in seconds (10 to 2592000).
    ttl_s: u64,
}

/// A share link. Its token is in `url` once, in the answer that made it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PortLinkView {
    /// `pl_…`: names the link for revocation.
    id: String,
    box_id: String,
    port: u16,
    /// Only when the link is made: opens the port without an API key until it expires
    /// or is revoked.
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    /// The same at the port's own host name, when `[ports] base_domain` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    host_url: Option<String>,
    created_at: String,
    expires_at: String,
    revoked_at: Option<String>,
    /// `live`, `expired` or `revoked`.
    state: &'static str,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PortLinkList {
    links: Vec<PortLinkView>,
}

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/ports/{port}/links", tag = "ports", summary = "Make a share link to a box's port", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("port" = u16, Path, description = "1 to 65535")), request_body = CreateBody, responses((status = 201, body = PortLinkView), (status = 400, description = "invalid request, or too many live links", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn create(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path((reference, port)): Path<(String, String)>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<Response, ApiError> {
    let port = parse_port(&port)?;
    let (record, new) = port_links::create(&ctx, &who.tenant_id, &reference, port, body.ttl_s)?;
    let mut view = view(&new.link);
    let query = format!("?{}={}", cookie::LINK_PARAM, new.token);
    let origin = Origin::of(&headers);
    view.url = Some(format!(
        "{}/v1/boxes/{}/ports/{port}/{query}",
        origin.url(None),
        record.name
    ));
    view.host_url = host_url(&ctx, &origin, &record, port).map(|u| format!("{u}{query}"));
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/ports/{port}/links", tag = "ports", summary = "List a port's share links (no tokens)", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("port" = u16, Path, description = "1 to 65535")), responses((status = 200, body = PortLinkList), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list_port(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path((reference, port)): Path<(String, String)>,
) -> Result<Json<PortLinkList>, ApiError> {
    let port = parse_port(&port)?;
    let links = port_links::list(&ctx, &who.tenant_id, &reference, Some(port))?;
    Ok(Json(PortLinkList {
        links: links.iter().map(view).collect(),
    }))
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/links", tag = "ports", summary = "List a box's share links, every port (no tokens)", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 200, body = PortLinkList), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list_box(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Json<PortLinkList>, ApiError> {
    let links = port_links::list(&ctx, &who.tenant_id, &reference, None)?;
    Ok(Json(PortLinkList {
        links: links.iter().map(view).collect(),
    }))
}

#[utoipa::path(delete, path = "/v1/boxes/{box_ref}/ports/{port}/links/{link_id}", tag = "ports", summary = "Revoke a share link: it and every cookie it opened stop at once", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("port" = u16, Path, description = "1 to 65535"), ("link_id" = String, Path, description = "`pl_…`")), responses((status = 200, body = PortLinkView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box or link", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn revoke_port(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path((reference, port, link_id)): Path<(String, String, String)>,
) -> Result<Json<PortLinkView>, ApiError> {
    let port = parse_port(&port)?;
    let link = port_links::revoke(&ctx, &who.tenant_id, &reference, Some(port), &link_id)?;
    Ok(Json(view(&link)))
}

#[utoipa::path(delete, path = "/v1/boxes/{box_ref}/links/{link_id}", tag = "ports", summary = "Revoke a share link of the box, whatever its port", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("link_id" = String, Path, description = "`pl_…`")), responses((status = 200, body = PortLinkView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box or link", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn revoke_box(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path((reference, link_id)): Path<(String, String)>,
) -> Result<Json<PortLinkView>, ApiError> {
    let link = port_links::revoke(&ctx, &who.tenant_id, &reference, None, &link_id)?;
    Ok(Json(view(&link)))
}

fn view(link: &PortLink) -> PortLinkView {
    let time = |t: time::OffsetDateTime| t.format(&Rfc3339).unwrap_or_default();
    let state = if link.revoked_at.is_some() {
        "revoked"
    } else if link.is_live(time::OffsetDateTime::now_utc()) {
        "live"
    } else {
        "expired"
    };
    PortLinkView {
        id: link.id.clone(),
        box_id: link.box_id.to_string(),
        port: link.port,
        url: None,
        host_url: None,
        created_at: time(link.created_at),
        expires_at: time(link.expires_at),
        revoked_at: link.revoked_at.map(time),
        state,
    }
}

/// Where the caller reached the daemon: the scheme (`X-Forwarded-Proto` from a TLS proxy
/// in front, else `http`), and the `Host` it asked for.
pub(crate) struct Origin {
    scheme: String,
    host: String,
}

impl Origin {
    pub(crate) fn of(headers: &HeaderMap) -> Origin {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
        };
        let scheme = match header("x-forwarded-proto") {
            Some("https") => "https",
            _ => "http",
        };
        Origin {
            scheme: scheme.to_owned(),
            host: header("host").unwrap_or("localhost").to_owned(),
        }
    }

    /// `scheme://host[:port]`, or with `name` in place of the host name (its port kept).
    fn url(&self, name: Option<&str>) -> String {
        match name {
            None => format!("{}://{}", self.scheme, self.host),
            Some(name) => {
                let port = self
                    .host
                    .rsplit_once(':')
                    .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
                    .map(|(_, p)| format!(":{p}"))
                    .unwrap_or_default();
                format!("{}://{name}{port}", self.scheme)
            }
        }
    }
}

/// `scheme://<port>-<name>.<base_domain>[:port]/`, when a base domain is set and the name
/// fits a DNS label with the port.
pub(crate) fn host_url(
    ctx: &Ctx,
    origin: &Origin,
    record: &BoxRecord,
    port: u16,
) -> Option<String> {
    let base = ctx.ports.base_domain.as_deref()?;
    let name = host::host_for(port, &record.name, base)?;
    Some(format!("{}/", origin.url(Some(&name))))
}

/// Where a box's port is reached.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PortUrls {
    port: u16,
    /// Needs the API key in `Authorization: Bearer` (or a share link's cookie).
    url: String,
    /// The port's own host name, when `[ports] base_domain` is set and the box's name fits.
    host_url: Option<String>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct PortQuery {
    /// 1 to 65535.
    port: String,
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/ports", tag = "ports", summary = "The URLs of a box's port (does not wake the box)", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), PortQuery), responses((status = 200, body = PortUrls), (status = 400, description = "invalid port", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn urls(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    headers: HeaderMap,
    crate::api::extract::ApiQuery(query): crate::api::extract::ApiQuery<PortQuery>,
) -> Result<Json<PortUrls>, ApiError> {
    let port = parse_port(&query.port)?;
    let record = crate::ops::box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let origin = Origin::of(&headers);
    Ok(Json(PortUrls {
        port,
        url: format!(
            "{}/v1/boxes/{}/ports/{port}/",
            origin.url(None),
            record.name
        ),
        host_url: host_url(&ctx, &origin, &record, port),
    }))
}
