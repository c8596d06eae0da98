//! The browser's session cookie, read in one place (issue 20).
//!
//! The cookie is `__Host-berth_session`: the prefix makes browsers take it only host-only,
//! `Path=/` and `Secure`, so no other host (a box's port host under `base_domain`) can set
//! it. [`read`] runs before the API's handlers, reads the request's session cookies once,
//! and leaves what it found as a [`SessionCookie`] extension; the rest of the code
//! ([`principal`]: `Caller`, the ports proxy's access check, sign-out) knows no name.
//!
//! - More than one session cookie, under either name, means one was planted (by a box's
//!   app before issue 20, by a page on a sibling host): berth cannot tell which is the
//!   user's, so whoever reads the session refuses the request (`400
//!   duplicate_session_cookie`, saying how out).
//! - The old name, `berth_session`, is taken only for a session made before migration 15
//!   whose browser has not yet shown the new name: the answer sets the new name with the
//!   same token and expires the old one, so nobody is signed out by the upgrade. Parallel
//!   requests with the old name are all taken; the first request under the new name ends
//!   the old one for that session (`Store::web_session_by_token`).
//! - Any other old-name cookie is junk (a session made later, or planted): the answer
//!   expires it on every path it could have been set on and for every domain from the
//!   request's host up to its registrable domain, so trying again works.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use berth_store::{Principal, WebSession};
use http::header::{HOST, SET_COOKIE};
use http::{Extensions, HeaderMap, HeaderValue};

use crate::api::error::ApiError;
use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ports::cookie::{self, LEGACY_WEB_SESSION, WEB_SESSION};
use crate::ports::host::strip_port;
use crate::ports::shared_site::registrable_domain;

/// The cookie outlives any session (400 days, the most browsers keep): the server ends an
/// idle or revoked session, while a cookie without `Max-Age` would die with the browser
/// (an installed app on iOS loses it whenever it is killed).
pub const MAX_AGE_S: u32 = 400 * 24 * 3600;
/// Paths, and domains, an old-name cookie is expired on: the shortest paths first (a
/// planted cookie names a short one to be sent with every API call).
const MAX_PATHS_EXPIRED: usize = 16;
const MAX_DOMAINS_EXPIRED: usize = 4;

/// What the request's session cookies are, for whoever reads the session.
#[derive(Debug, Clone)]
pub enum SessionCookie {
    /// One `__Host-berth_session`: its session is looked up when read.
    Current(String),
    /// One old-name cookie of a session from before the rename, looked up already.
    Legacy(WebSession),
    /// More than one session cookie. `own`: the `__Host-` one when there is exactly one:
    /// only berth can have set it, so signing out ends its session.
    Several { count: usize, own: Option<String> },
}

/// `Set-Cookie` for a signed-in browser.
pub fn set_cookie(token: &str) -> String {
    format!("{WEB_SESSION}={token}; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age={MAX_AGE_S}")
}

/// `Set-Cookie` that signs the browser out (the same name and attributes, expired).
pub fn cleared() -> String {
    format!("{WEB_SESSION}=; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=0")
}

/// `Set-Cookie` that expires an old-name cookie set on `path` (and `domain`).
fn legacy_expired(path: &str, domain: Option<&str>) -> String {
    match domain {
        None => format!("{LEGACY_WEB_SESSION}=; Path={path}; Max-Age=0"),
        Some(domain) => format!("{LEGACY_WEB_SESSION}=; Path={path}; Max-Age=0; Domain={domain}"),
    }
}

/// Which old-name cookies the answer expires.
enum Expire {
    Nothing,
    /// The one berth set itself before the rename (`Path=/`, host-only).
    Own,
    /// Wherever one could have been set.
    Everywhere,
}

/// Middleware on the API: reads the session cookies into a [`SessionCookie`], and tells
/// the browser, with the answer, what to keep.
pub async fn read(State(ctx): State<Ctx>, mut request: Request, next: Next) -> Response {
    let found = cookie::web_session_cookies(request.headers());
    let (state, upgrade, expire) = match found.as_slice() {
        [] => return next.run(request).await,
        [one] if !one.legacy => (
            Some(SessionCookie::Current(one.token.clone())),
            None,
            Expire::Nothing,
        ),
        [one] => match ctx.store.legacy_web_session(&one.token) {
            Ok(Some(session)) => (
                Some(SessionCookie::Legacy(session)),
                Some(one.token.clone()),
                Expire::Own,
            ),
            Ok(None) => (None, None, Expire::Everywhere),
            Err(e) => return ApiError::Op(OpError::Store(Box::new(e))).into_response(),
        },
        several => {
            let current: Vec<&str> = several
                .iter()
                .filter(|c| !c.legacy)
                .map(|c| c.token.as_str())
                .collect();
            let state = SessionCookie::Several {
                count: several.len(),
                own: match current.as_slice() {
                    [own] => Some((*own).to_owned()),
                    _ => None,
                },
            };
            let expire = if several.iter().any(|c| c.legacy) {
                Expire::Everywhere
            } else {
                Expire::Nothing
            };
            (Some(state), None, expire)
        }
    };
    let host = request
        .headers()
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let path = request.uri().path().to_owned();
    if let Some(state) = state {
        request.extensions_mut().insert(state);
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    // A handler that set the cookie itself (signing in, out) decided: it is not undone.
    if let Some(token) = upgrade.filter(|_| !sets(headers, WEB_SESSION)) {
        append(headers, &set_cookie(&token));
    }
    if !sets(headers, LEGACY_WEB_SESSION) {
        match expire {
            Expire::Nothing => {}
            Expire::Own => append(headers, &legacy_expired("/", None)),
            Expire::Everywhere => {
                let domains = domains_of(&host);
                for path in cookie_paths(&path) {
                    append(headers, &legacy_expired(&path, None));
                    for domain in &domains {
                        append(headers, &legacy_expired(&path, Some(domain)));
                    }
                }
            }
        }
    }
    response
}

/// Who the request's session cookie signs in, if anyone; several cookies are refused.
pub fn principal(ctx: &Ctx, extensions: &Extensions) -> Result<Option<Principal>, ApiError> {
    resolve(ctx, extensions, false)
}

/// [`principal`] for signing out: with several cookies, berth's own (`__Host-`) one's.
pub fn principal_signing_out(
    ctx: &Ctx,
    extensions: &Extensions,
) -> Result<Option<Principal>, ApiError> {
    resolve(ctx, extensions, true)
}

fn resolve(
    ctx: &Ctx,
    extensions: &Extensions,
    signing_out: bool,
) -> Result<Option<Principal>, ApiError> {
    let session = match extensions.get::<SessionCookie>() {
        None => None,
        Some(SessionCookie::Current(token)) => lookup(ctx, token)?,
        Some(SessionCookie::Legacy(session)) => Some(session.clone()),
        Some(SessionCookie::Several {
            own: Some(token), ..
        }) if signing_out => lookup(ctx, token)?,
        Some(SessionCookie::Several { count, .. }) => {
            return Err(ApiError::DuplicateSessionCookie { count: *count })
        }
    };
    Ok(session.map(|s| Principal {
        tenant_id: s.tenant_id,
        is_admin: false,
        web_session: Some(s.id),
        api_key_id: None,
    }))
}

fn lookup(ctx: &Ctx, token: &str) -> Result<Option<WebSession>, ApiError> {
    ctx.store
        .web_session_by_token(token)
        .map_err(|e| ApiError::Op(OpError::Store(Box::new(e))))
}

fn sets(headers: &HeaderMap, name: &str) -> bool {
    headers
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('='))
        })
}

fn append(headers: &mut HeaderMap, set_cookie: &str) {
    // Tokens are hex, paths and host names came in as header text: always valid.
    if let Ok(value) = HeaderValue::from_str(set_cookie) {
        headers.append(SET_COOKIE, value);
    }
}

/// Every `Path` a cookie sent with a request for `path` can have (RFC 6265 §5.1.4): `/`,
/// then each prefix ending before or at a `/`, then the path itself.
fn cookie_paths(path: &str) -> Vec<String> {
    let mut paths = vec!["/".to_owned()];
    for (i, _) in path.match_indices('/').skip(1) {
        paths.push(path[..i].to_owned());
        paths.push(path[..=i].to_owned());
    }
    if path.len() > 1 && !path.ends_with('/') {
        paths.push(path.to_owned());
    }
    paths.truncate(MAX_PATHS_EXPIRED);
    paths
}

/// The `Domain`s a cookie sent to `host` can have: the host itself, then each parent down
/// to its registrable domain (none for an IP address or a name the list does not know).
fn domains_of(host: &str) -> Vec<String> {
    let host = strip_port(host).trim_end_matches('.').to_ascii_lowercase();
    let Some(site) = registrable_domain(&host) else {
        return Vec::new();
    };
    let mut domains = Vec::new();
    let mut domain = host.as_str();
    while domains.len() < MAX_DOMAINS_EXPIRED {
        domains.push(domain.to_owned());
        if domain == site {
            break;
        }
        match domain.split_once('.') {
            Some((_, parent)) => domain = parent,
            None => break,
        }
    }
    domains
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_cookie_is_expired_on_every_path_and_domain_it_could_have() {
        assert_eq!(
            cookie_paths("/v1/web/session"),
            ["/", "/v1", "/v1/", "/v1/web", "/v1/web/", "/v1/web/session"]
        );
        assert_eq!(cookie_paths("/"), ["/"]);
        assert_eq!(cookie_paths("/v1/"), ["/", "/v1", "/v1/"]);
        assert_eq!(cookie_paths(&"/a".repeat(40)).len(), MAX_PATHS_EXPIRED);
        assert_eq!(
            domains_of("Berth.Example.co.uk:8443"),
            ["berth.example.co.uk", "example.co.uk"]
        );
        assert_eq!(
            domains_of("a.b.c.d.e.example.com").len(),
            MAX_DOMAINS_EXPIRED
        );
        assert_eq!(domains_of("127.0.0.1:7070"), Vec::<String>::new());
        assert_eq!(domains_of("localhost:7070"), Vec::<String>::new());
    }

    #[test]
    fn a_handlers_own_cookie_is_recognised_by_name() {
        let mut headers = HeaderMap::new();
        append(&mut headers, &cleared());
        assert!(sets(&headers, WEB_SESSION));
        assert!(!sets(&headers, LEGACY_WEB_SESSION));
        append(&mut headers, &legacy_expired("/", Some("example.com")));
        assert!(sets(&headers, LEGACY_WEB_SESSION));
        assert!(set_cookie("bws_1").starts_with("__Host-berth_session=bws_1; HttpOnly; Secure"));
    }
}
