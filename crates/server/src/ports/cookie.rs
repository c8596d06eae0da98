//! The cookie a share link opens (`berth_port`): HttpOnly, SameSite=Lax, scoped to one
//! port's path (or, under `base_domain`, to the port's own host name, which a host-only
//! cookie without `Domain` is), and never forwarded to the app. Nor is the web app's
//! session cookie (`berth_session`): it signs a browser in to the whole API.

use http::header::COOKIE;
use http::{HeaderMap, HeaderValue};

pub const NAME: &str = "berth_port";
/// A signed-in browser's cookie (`api/web_sessions.rs`).
pub const WEB_SESSION: &str = "berth_session";
/// The query parameter that carries a share link's token.
pub const LINK_PARAM: &str = "berth_link";

/// `Set-Cookie` for a session token that lives `max_age_s` more seconds, on `path`.
pub fn set_cookie(token: &str, path: &str, max_age_s: i64) -> String {
    format!(
        "{NAME}={token}; Path={path}; Max-Age={}; HttpOnly; SameSite=Lax",
        max_age_s.max(0)
    )
}

/// The session token in the request's cookies, if any.
pub fn session_token(headers: &HeaderMap) -> Option<String> {
    named(headers, NAME)
}

/// The web session token in the request's cookies, if any.
pub fn web_session_token(headers: &HeaderMap) -> Option<String> {
    named(headers, WEB_SESSION)
}

fn named(headers: &HeaderMap, wanted: &str) -> Option<String> {
    pairs(headers)
        .find(|(name, _)| *name == wanted)
        .map(|(_, value)| value.to_owned())
}

/// The `Cookie` header without berth's own cookies (`None`: nothing left to send).
pub fn without_ours(headers: &HeaderMap) -> Option<HeaderValue> {
    let kept: Vec<String> = pairs(headers)
        .filter(|(name, _)| *name != NAME && *name != WEB_SESSION)
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    if kept.is_empty() {
        return None;
    }
    HeaderValue::from_str(&kept.join("; ")).ok()
}

fn pairs(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            Some((name.trim(), value.trim()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_is_read_and_taken_out_and_the_apps_are_kept() {
        let mut headers = HeaderMap::new();
        headers.append(COOKIE, "theme=dark; berth_port=bps_1".parse().unwrap());
        headers.append(COOKIE, "sid=abc; berth_session=bws_1".parse().unwrap());
        assert_eq!(session_token(&headers).as_deref(), Some("bps_1"));
        assert_eq!(web_session_token(&headers).as_deref(), Some("bws_1"));
        assert_eq!(without_ours(&headers).unwrap(), "theme=dark; sid=abc");
        let mut only_ours = HeaderMap::new();
        only_ours.insert(COOKIE, "berth_port=bps_1".parse().unwrap());
        assert_eq!(without_ours(&only_ours), None);
        let set = set_cookie("bps_2", "/v1/boxes/a/ports/80/", 60);
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Lax") && set.contains("Max-Age=60")
        );
    }
}
