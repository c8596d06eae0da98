//! A box's ports through berth: `/v1/boxes/{ref}/ports/{port}/<path>` (any method), and
//! `<port>-<box name>.<base_domain>` at `/` when `[ports] base_domain` is set.
//!
//! Who may: the tenant's API key (`Authorization: Bearer`), a signed-in browser's session
//! cookie (by path; writes and upgrades from berth's own origin only), or a share link.
//! Answers by path (under berth's origin) get a sandbox CSP: the app's pages run in an
//! opaque origin, never with berth's; and no answer's `Set-Cookie` may reach berth's
//! cookies (`ports/cookie.rs`: none at all by path). A request
//! with `?berth_link=<token>` is checked and answered with a redirect to the same URL
//! without the token, setting a cookie whose own token is short-lived and ends with the
//! link; later requests carry the cookie. Errors are JSON, or a short HTML page when the
//! client asks for `text/html` (a browser).

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use berth_store::BoxRecord;
use http::header::{self, HeaderValue};
use http::StatusCode;

use crate::api::error::ApiError;
use crate::api::{session_cookie, web_origin};
use crate::ctx::Ctx;
use crate::e2b::envd;
use crate::error::OpError;
use crate::ops::box_find::find_box;
use crate::ops::port_connect::parse_port;
use crate::ops::{port_links, port_proxy};
use crate::ports::cookie::{self, Served};
use crate::ports::host::{match_host, HostMatch};
use crate::ports::proxy::{self, Forwarding};
use crate::tls::ServedOverTls;

/// The port a request is for, and how the app sees its path.
#[derive(Debug)]
struct Target {
    reference: String,
    port: u16,
    /// `/v1/boxes/{ref}/ports/{port}` by path; `None` at a port's own host name.
    prefix: Option<String>,
    /// What follows the prefix, with the query: the app's path.
    path_and_query: String,
}

impl Target {
    /// The cookie's `Path`: one port's URLs, or the whole port host.
    fn cookie_path(&self) -> String {
        match &self.prefix {
            Some(prefix) => format!("{prefix}/"),
            None => "/".into(),
        }
    }
}

/// The proxy's entry in the OpenAPI document (any method is served; the document names
/// GET, as OpenAPI has no "any").
#[utoipa::path(get, path = "/v1/boxes/{box_ref}/ports/{port}/{path}", tag = "ports", summary = "Any method: HTTP or a WebSocket upgrade forwarded to 127.0.0.1:{port} in the box (wakes it, waits for the port to listen); with the API key or a share link", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("port" = u16, Path, description = "1 to 65535 (not 443 or 3128, berth's own in the box)"), ("path" = String, Path, description = "the app's path, with the query"), ("berth_link" = Option<String>, Query, description = "a share link's token: answered with 303 to the same URL without it, setting the `berth_port` cookie")), responses((status = 200, description = "the app's answer, whatever its status; by path without any `Set-Cookie` or `Clear-Site-Data`, at a port's host name without a cookie that names `Domain` or is named like berth's"), (status = 303, description = "a share link's token was traded for a cookie"), (status = 400, description = "`duplicate_session_cookie`: more than one berth session cookie", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key, link or cookie", body = berth_protocol::ErrorBody), (status = 403, description = "the share link expired, was revoked, or is for another port", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 429, description = "too many connections to box ports", body = berth_protocol::ErrorBody), (status = 502, description = "the app broke HTTP, or answered 101 to a request that asked for no upgrade", body = berth_protocol::ErrorBody), (status = 503, description = "nothing listened on the port within `[ports] listen_wait_s`", body = berth_protocol::ErrorBody), (status = 504, description = "the app began no answer within `[ports] answer_timeout_s`", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
#[allow(dead_code)]
fn proxy() {}

/// `ANY /v1/boxes/{box_ref}/ports/{port}/…`.
pub async fn by_path(State(ctx): State<Ctx>, request: Request) -> Response {
    let html = wants_html(&request);
    let target = match path_target(request.uri()) {
        Ok(target) => target,
        Err(e) => return error_answer(e, html),
    };
    serve(ctx, target, request, html).await
}

/// `/v1/boxes/{ref}/ports/{port}` without the slash: the app's URLs are relative to the
/// directory, and the cookie's path ends with `/`.
pub async fn add_slash(request: Request) -> Response {
    let uri = request.uri();
    let location = match uri.query() {
        Some(query) => format!("{}/?{query}", uri.path()),
        None => format!("{}/", uri.path()),
    };
    redirect(StatusCode::PERMANENT_REDIRECT, &location, None)
}

/// Middleware before routing: a request whose `Host` is a port's host name goes to that
/// port whatever its path; any other goes on to the API.
pub async fn by_host(State(ctx): State<Ctx>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    match match_host(host, ctx.ports.base_domain.as_deref()) {
        HostMatch::Api => {
            ctx.shared_site.check(host);
            next.run(request).await
        }
        HostMatch::Malformed { why } => error_answer(
            ApiError::Malformed {
                part: "host name",
                detail: why.to_owned(),
            },
            wants_html(&request),
        ),
        HostMatch::Port(port_host) if is_envd(&ctx, &port_host) => {
            let mut request = request;
            request
                .extensions_mut()
                .insert(envd::caller::SandboxByHost(port_host.box_name));
            envd::serve(ctx, request).await
        }
        HostMatch::Port(port_host) => {
            let html = wants_html(&request);
            let target = Target {
                reference: port_host.box_name,
                port: port_host.port,
                prefix: None,
                path_and_query: request
                    .uri()
                    .path_and_query()
                    .map(|p| p.as_str().to_owned())
                    .unwrap_or_else(|| "/".into()),
            };
            serve(ctx, target, request, html).await
        }
    }
}

/// Whether a port's host name is an E2B sandbox's envd (`49983-<sandboxID>`): served by the
/// daemon itself, never by a program of the box listening on that port.
pub(crate) fn is_envd(ctx: &Ctx, port_host: &crate::ports::host::PortHost) -> bool {
    port_host.port == envd::ENVD_PORT
        && ctx
            .store
            .e2b_sandbox_on_host(&port_host.box_name)
            .is_ok_and(|row| row.is_some())
}

/// The box a request at a port's host name is for, found as [`access`] finds it (for an
/// API replica, which forwards the request to the box's node); `None` when it redeems a
/// share link (the replica answers that itself: it sets a cookie) or opens nothing.
pub(crate) fn host_box(
    ctx: &Ctx,
    port_host: &crate::ports::host::PortHost,
    request: &Request,
) -> Option<BoxRecord> {
    if take_link_param(request.uri().query()).is_some() {
        return None;
    }
    let target = Target {
        reference: port_host.box_name.clone(),
        port: port_host.port,
        prefix: None,
        path_and_query: String::new(),
    };
    access(ctx, &target, request).ok().map(|(_, record)| record)
}

/// Reads `/v1/boxes/{ref}/ports/{port}{rest}` from the raw path (the app gets `rest` as
/// the client encoded it).
fn path_target(uri: &http::Uri) -> Result<Target, ApiError> {
    let path = uri.path();
    let mut parts = path.splitn(6, '/');
    let (reference, port_and_rest) = match (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) {
        (Some(""), Some("v1"), Some("boxes"), Some(reference), Some("ports"), Some(rest)) => {
            (reference, rest)
        }
        _ => {
            return Err(ApiError::Malformed {
                part: "path",
                detail: "expected /v1/boxes/{ref}/ports/{port}/…".into(),
            })
        }
    };
    let (port_text, rest) = match port_and_rest.find('/') {
        Some(i) => port_and_rest.split_at(i),
        None => (port_and_rest, "/"),
    };
    let port = parse_port(port_text)?;
    let path_and_query = match uri.query() {
        Some(query) => format!("{rest}?{query}"),
        None => rest.to_owned(),
    };
    Ok(Target {
        reference: reference.to_owned(),
        port,
        prefix: Some(format!("/v1/boxes/{reference}/ports/{port_text}")),
        path_and_query,
    })
}

async fn serve(ctx: Ctx, target: Target, request: Request, html: bool) -> Response {
    match serve_or_fail(ctx, target, request).await {
        Ok(response) => response,
        Err(e) => error_answer(e, html),
    }
}

async fn serve_or_fail(ctx: Ctx, target: Target, request: Request) -> Result<Response, ApiError> {
    if let Some((token, rest)) = take_link_param(request.uri().query()) {
        let over_tls = request.extensions().get::<web_origin::OverTls>().is_some();
        return open_link(&ctx, &target, request.uri().path(), &token, rest, over_tls);
    }
    let (tenant, record) = access(&ctx, &target, &request)?;
    crate::admission::connection::charge(request.extensions(), &tenant)?;
    let served = match target.prefix {
        Some(_) => Served::ByPath,
        None => Served::ByHost,
    };
    let forwarding = Forwarding {
        port: target.port,
        path_and_query: target.path_and_query,
        prefix: target.prefix,
        client: request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip()),
        over_tls: request.extensions().get::<ServedOverTls>().is_some(),
    };
    let mut response = port_proxy::forward(&ctx, &tenant, &record, request, &forwarding).await?;
    if served == Served::ByPath {
        proxy::sandbox(response.headers_mut());
    }
    cookie::keep_off_berths(response.headers_mut(), served);
    Ok(response)
}

/// Who the request is for: the API key's tenant and its box, a signed-in browser's (its
/// tenant's box of that name first), or a live share-link session's link and the link's
/// box (only that box and port). Page script at a port's host name can add share-link
/// cookies of its own: each is tried (a few).
/// An E2B sandbox's port opened with its `e2b-traffic-access-token` (the SDK's
/// `trafficAccessToken`): that sandbox's box only. A wrong token opens nothing and falls
/// through to berth's own ways in.
fn e2b_traffic(
    ctx: &Ctx,
    target: &Target,
    headers: &http::HeaderMap,
) -> Result<Option<(berth_protocol::TenantId, BoxRecord)>, ApiError> {
    let Some(token) = headers
        .get(crate::e2b::access_key::TRAFFIC_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(None);
    };
    let store = |e| ApiError::Op(OpError::Store(Box::new(e)));
    let Some(row) = ctx
        .store
        .e2b_sandbox_on_host(&target.reference)
        .map_err(store)?
    else {
        return Ok(None);
    };
    if !crate::e2b::access_token::check_traffic(ctx, &row.box_id, token.trim()) {
        return Ok(None);
    }
    let record = ctx.store.get_box(&row.box_id).map_err(store)?;
    Ok(record.map(|record| (row.tenant_id, record)))
}

fn access(
    ctx: &Ctx,
    target: &Target,
    request: &Request,
) -> Result<(berth_protocol::TenantId, BoxRecord), ApiError> {
    let headers = request.headers();
    if let Some(granted) = e2b_traffic(ctx, target, headers)? {
        return Ok(granted);
    }
    let key = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|k| k.starts_with("berth_"));
    if let Some(key) = key {
        let principal = ctx
            .store
            .authenticate(key)
            .map_err(|e| ApiError::Op(OpError::Store(Box::new(e))))?
            .ok_or(ApiError::Unauthorized)?;
        let record = find_box(ctx, &principal.tenant_id, &target.reference)?;
        return Ok((principal.tenant_id, record));
    }
    let link_tokens = cookie::session_tokens(headers);
    if let Some(principal) = session_cookie::principal(ctx, request.extensions())? {
        if web_origin::needs_check(request.method(), headers) {
            web_origin::require_own(ctx, headers)?;
        }
        match find_box(ctx, &principal.tenant_id, &target.reference) {
            Ok(record) => return Ok((principal.tenant_id, record)),
            // Another tenant's share link opened in a signed-in browser: its cookie decides.
            // Only then: a box of the user's own by that name is never shadowed by a link.
            Err(OpError::BoxNotFound { .. }) if !link_tokens.is_empty() => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut refused = None;
    for token in link_tokens {
        let granted = port_links::by_session(ctx, &token).and_then(|link| {
            port_links::box_of_link(ctx, &link, &target.reference, target.port)
                .map(|record| (link.tenant_id, record))
        });
        match granted {
            Ok(granted) => return Ok(granted),
            Err(e @ OpError::LinkRefused(_)) => {
                refused.get_or_insert(e);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(refused.map_or(ApiError::NoPortAccess, ApiError::Op))
}

/// A share link's token: checked, then traded for the cookie, and the browser sent on to
/// the same URL without the token (so it leaves the address bar and the history).
fn open_link(
    ctx: &Ctx,
    target: &Target,
    path: &str,
    token: &str,
    rest_query: String,
    over_tls: bool,
) -> Result<Response, ApiError> {
    let (link, session) = port_links::open(ctx, token)?;
    port_links::box_of_link(ctx, &link, &target.reference, target.port)?;
    let max_age = (session.expires_at - time::OffsetDateTime::now_utc()).whole_seconds();
    let set_cookie = cookie::set_cookie(&session.token, &target.cookie_path(), max_age, over_tls);
    Ok(redirect(
        StatusCode::SEE_OTHER,
        &same_place(path, &rest_query),
        Some(&set_cookie),
    ))
}

/// The URL a link's redirect sends the browser to: this path, the query without the token.
fn same_place(path: &str, rest_query: &str) -> String {
    // One leading slash only: browsers read `//host` and `/\host` as another host (an open
    // redirect through a valid link, at a port's host name where the path is the client's).
    let path = format!("/{}", path.trim_start_matches(['/', '\\']));
    if rest_query.is_empty() {
        path
    } else {
        format!("{path}?{rest_query}")
    }
}

/// The link token in `query`, and the query without it.
fn take_link_param(query: Option<&str>) -> Option<(String, String)> {
    let query = query?;
    let mut token = None;
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((cookie::LINK_PARAM, value)) if token.is_none() => token = Some(value.to_owned()),
            _ if pair == cookie::LINK_PARAM => token = Some(String::new()),
            _ => kept.push(pair),
        }
    }
    token.map(|t| (t, kept.join("&")))
}

fn redirect(status: StatusCode, location: &str, set_cookie: Option<&str>) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    if let Some(value) = set_cookie.and_then(|c| HeaderValue::from_str(c).ok()) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn wants_html(request: &Request) -> bool {
    request
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"))
}

/// The JSON error, or for a browser the same words on a short page.
fn error_answer(error: ApiError, html: bool) -> Response {
    if !html {
        return error.into_response();
    }
    let (status, code) = error.status_and_code();
    let message = error.message(status);
    let page = format!(
        "<!doctype html>\n<meta charset=\"utf-8\"><title>{status}</title>\n<h1>{status}</h1>\n<p>{}</p>\n<p><small>{code}</small></p>\n",
        escape(&message)
    );
    let mut response = (status, page).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_after_the_port_is_the_apps() {
        let uri: http::Uri = "/v1/boxes/alice/ports/8000/a/b%20c?x=1".parse().unwrap();
        let t = path_target(&uri).unwrap();
        assert_eq!((t.reference.as_str(), t.port), ("alice", 8000));
        assert_eq!(t.path_and_query, "/a/b%20c?x=1");
        assert_eq!(t.prefix.as_deref(), Some("/v1/boxes/alice/ports/8000"));
        assert_eq!(t.cookie_path(), "/v1/boxes/alice/ports/8000/");
        let bare = path_target(&"/v1/boxes/a/ports/80".parse().unwrap()).unwrap();
        assert_eq!(bare.path_and_query, "/");
        assert!(path_target(&"/v1/boxes/a/ports/0/".parse().unwrap()).is_err());
        assert!(path_target(&"/v1/boxes/a/ports/x/".parse().unwrap()).is_err());
    }

    #[test]
    fn a_links_redirect_stays_on_this_host() {
        assert_eq!(same_place("/a/b", "x=1"), "/a/b?x=1");
        assert_eq!(same_place("/", ""), "/");
        // At a port's host name the path is the client's: `//evil.example/` or
        // `/\evil.example/` in a Location would send the browser to another host.
        for path in ["//evil.example/x", "/\\evil.example/x", "///evil.example"] {
            let location = same_place(path, "");
            assert!(
                location.starts_with('/')
                    && !location.starts_with("//")
                    && !location.starts_with("/\\"),
                "{path} → {location}"
            );
        }
    }

    #[test]
    fn the_link_token_is_taken_out_of_the_query() {
        assert_eq!(
            take_link_param(Some("a=1&berth_link=bpl_x&b=2")),
            Some(("bpl_x".into(), "a=1&b=2".into()))
        );
        assert_eq!(take_link_param(Some("a=1")), None);
        assert_eq!(take_link_param(None), None);
    }
}
