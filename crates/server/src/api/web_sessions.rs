//! Web sessions and pairing: `POST /v1/web/pairings`, `POST /v1/web/sessions` (sign in),
//! `GET|DELETE /v1/web/session` (this browser), `GET /v1/web/sessions`,
//! `DELETE /v1/web/sessions/{id}` (docs/api.md, "Web sessions and pairing").

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use berth_store::WebSession;
use http::header::{SET_COOKIE, USER_AGENT};
use http::{HeaderMap, HeaderValue, StatusCode};
use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::ApiJson;
use crate::api::{session_cookie, web_origin};
use crate::ctx::Ctx;
use crate::ops::web_sessions::{self as ops, PairError};

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PairBody {
    /// Admin only: the tenant (name or `tn_…`) the browser signs in as. Default: the key's.
    #[serde(default)]
    tenant: Option<String>,
    /// How long the code works, in seconds (10 to 3600; default 600).
    #[serde(default)]
    ttl_s: Option<u64>,
}

/// A one-time pairing code. Shown once: opening `url` signs a browser in.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PairingView {
    /// `bwp_…`: trade it at `POST /v1/web/sessions` (the web app does).
    code: String,
    /// `<berth's origin>/#/pair/<code>`: the code is in the fragment, which no browser
    /// sends to a server, so no log or `Referer` ever holds it.
    url: String,
    expires_at: String,
}

/// Sign in with a pairing code or an API key (exactly one).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignInBody {
    #[serde(default)]
    pairing_code: Option<String>,
    #[serde(default)]
    api_key: Option<String>,
    /// What to call this browser in listings (default: read from its User-Agent); cut to
    /// 64 characters.
    #[serde(default)]
    device: Option<String>,
}

/// A signed-in browser; never its token.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebSessionView {
    /// `ws_…`: names the session for revocation.
    id: String,
    /// The tenant's name.
    tenant: String,
    device: String,
    created_at: String,
    /// To the minute.
    last_used_at: String,
    /// What signed it in: `pairing`, `api_key` (it ends when that key is revoked) or
    /// `unknown` (before berth recorded it: it ends when any key of the tenant is revoked).
    opened_with: &'static str,
    /// `api_key` only: the key's id (`key_…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    api_key_id: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebSessionList {
    sessions: Vec<WebSessionView>,
}

#[utoipa::path(post, path = "/v1/web/pairings", tag = "web", summary = "Make a one-time link that signs a browser in (an API key only)", request_body = PairBody, responses((status = 201, body = PairingView), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 403, description = "another tenant, without an admin key", body = berth_protocol::ErrorBody), (status = 404, description = "no such tenant", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn pair(
    State(ctx): State<Ctx>,
    caller: Caller,
    headers: HeaderMap,
    tls: Option<Extension<web_origin::OverTls>>,
    ApiJson(body): ApiJson<PairBody>,
) -> Result<Response, ApiError> {
    // A signed-in browser does not mint sign-ins: a stolen cookie must not outlive its
    // revocation through sessions it made.
    if caller.web_session().is_some() {
        return Err(ApiError::Unauthorized);
    }
    let pairing =
        ops::pair(&ctx, &caller.0, body.tenant.as_deref(), body.ttl_s).map_err(|e| match e {
            PairError::OtherTenant => ApiError::AdminRequired,
            PairError::Op(op) => ApiError::Op(op),
        })?;
    let view = PairingView {
        url: format!(
            "{}/#/pair/{}",
            web_origin::base_url(&ctx, &headers, tls.is_some()),
            pairing.code
        ),
        code: pairing.code,
        expires_at: time(pairing.expires_at),
    };
    Ok((StatusCode::CREATED, no_store(), Json(view)).into_response())
}

#[utoipa::path(post, path = "/v1/web/sessions", tag = "web", summary = "Sign a browser in with a pairing code or an API key: sets the __Host-berth_session cookie (no key needed)", request_body = SignInBody, responses((status = 201, description = "signed in; `Set-Cookie: __Host-berth_session=…; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=34560000` (the `__Host-` prefix: browsers take it only host-only, `Path=/` and `Secure`, so no other host, a box's port host among them, can set it; browsers treat http://localhost and 127.0.0.1 as secure). The name before issue 20, `berth_session`, is still taken for a session made before it, and moved to the new name by the answer", body = WebSessionView), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "the code or key is unknown, used or expired", body = berth_protocol::ErrorBody), (status = 403, description = "`bad_origin`: sent from another site's page", body = berth_protocol::ErrorBody)))]
pub async fn sign_in(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<SignInBody>,
) -> Result<Response, ApiError> {
    // Login CSRF: another site must not sign this browser in as someone else.
    web_origin::refuse_foreign(&ctx, &headers)?;
    let agent = headers.get(USER_AGENT).and_then(|v| v.to_str().ok());
    let device = ops::device_name(body.device.as_deref(), agent);
    let new = match (&body.pairing_code, &body.api_key) {
        (Some(code), None) => ops::sign_in_with_code(&ctx, code.trim(), &device)?,
        (None, Some(key)) => ops::sign_in_with_key(&ctx, key.trim(), &device)?,
        _ => {
            return Err(ApiError::Malformed {
                part: "body",
                detail: "give exactly one of `pairing_code` and `api_key`".into(),
            })
        }
    };
    let new = new.ok_or(ApiError::SignInRefused)?;
    let cookie = session_cookie::set_cookie(&new.token);
    let mut response = (StatusCode::CREATED, no_store(), Json(view(&new.session))).into_response();
    response.headers_mut().insert(SET_COOKIE, header(&cookie));
    Ok(response)
}

#[utoipa::path(get, path = "/v1/web/session", tag = "web", summary = "This browser's session (the cookie only)", responses((status = 200, body = WebSessionView), (status = 400, description = "`duplicate_session_cookie`: more than one berth session cookie (one set by a page that is not berth's): sign out, or clear the site's cookies", body = berth_protocol::ErrorBody), (status = 401, description = "not a signed-in browser", body = berth_protocol::ErrorBody)))]
pub async fn current(State(ctx): State<Ctx>, caller: Caller) -> Result<Response, ApiError> {
    let id = caller.web_session().ok_or(ApiError::NoWebSession)?;
    let session = ops::current(&ctx, &caller.0.tenant_id, id)?.ok_or(ApiError::NoWebSession)?;
    Ok((no_store(), Json(view(&session))).into_response())
}

#[utoipa::path(delete, path = "/v1/web/session", tag = "web", summary = "Sign this browser out: ends its session and clears the cookie (also with several session cookies: then the one berth set is ended)", responses((status = 204, description = "signed out"), (status = 401, description = "not a signed-in browser", body = berth_protocol::ErrorBody), (status = 403, description = "`bad_origin`", body = berth_protocol::ErrorBody)))]
pub async fn sign_out(
    State(ctx): State<Ctx>,
    method: http::Method,
    headers: HeaderMap,
    extensions: http::Extensions,
) -> Result<Response, ApiError> {
    // Not `Caller`: with a planted second cookie, signing out is the way out.
    let who =
        session_cookie::principal_signing_out(&ctx, &extensions)?.ok_or(ApiError::NoWebSession)?;
    if web_origin::needs_check(&method, &headers) {
        web_origin::require_own(&ctx, &headers)?;
    }
    let id = who.web_session.as_deref().ok_or(ApiError::NoWebSession)?;
    ops::revoke(&ctx, &who.tenant_id, id)?;
    let mut response = StatusCode::NO_CONTENT.into_response();
    response
        .headers_mut()
        .insert(SET_COOKIE, header(&session_cookie::cleared()));
    Ok(response)
}

#[utoipa::path(get, path = "/v1/web/sessions", tag = "web", summary = "The tenant's signed-in browsers, most recently used first", responses((status = 200, body = WebSessionList), (status = 401, description = "no valid API key or cookie", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list(State(ctx): State<Ctx>, Caller(who): Caller) -> Result<Response, ApiError> {
    let sessions = ops::list(&ctx, &who.tenant_id)?;
    let list = WebSessionList {
        sessions: sessions.iter().map(view).collect(),
    };
    Ok((no_store(), Json(list)).into_response())
}

#[utoipa::path(delete, path = "/v1/web/sessions/{id}", tag = "web", summary = "Revoke a browser's session: its cookie stops working at once", params(("id" = String, Path, description = "`ws_…`")), responses((status = 204, description = "revoked"), (status = 401, description = "no valid API key or cookie", body = berth_protocol::ErrorBody), (status = 404, description = "no such session", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn revoke(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if ops::revoke(&ctx, &who.tenant_id, &id)? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::WebSessionNotFound { id })
    }
}

fn view(session: &WebSession) -> WebSessionView {
    WebSessionView {
        id: session.id.clone(),
        tenant: session.tenant_name.clone(),
        device: session.device.clone(),
        created_at: time(session.created_at),
        last_used_at: time(session.last_used_at),
        opened_with: session.opened_with.as_str(),
        api_key_id: session.opened_with.api_key_id().map(str::to_owned),
    }
}

fn time(t: time::OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

/// Answers that carry codes or session details are never cached.
fn no_store() -> [(http::HeaderName, HeaderValue); 1] {
    [(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    )]
}

fn header(text: &str) -> HeaderValue {
    // Tokens are hex: always a valid header value.
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}
