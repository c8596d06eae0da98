//! berth's cookies, and an app's kept away from them (issue 20: session fixation through
//! the ports proxy).
//!
//! - The share-link cookie (`berth_port`): HttpOnly, SameSite=Lax, `Secure` over TLS,
//!   scoped to one port's path (or, under `base_domain`, to the port's own host name,
//!   which a host-only cookie without `Domain` is), and never forwarded to the app.
//! - The web app's session cookie (`__Host-berth_session`, before issue 20
//!   `berth_session`): it signs a browser in to the whole API. Read in one place,
//!   `api/session_cookie.rs`; never forwarded to the app either.
//!
//! An app's own `Set-Cookie` could plant or overwrite berth's cookies in the browser of
//! whoever opens its pages: [`keep_off_berths`] takes such headers out of every answer.

use http::header::{HeaderName, COOKIE, SET_COOKIE};
use http::{HeaderMap, HeaderValue};

/// Asks the browser to drop the origin's cookies and storage (W3C Clear Site Data).
const CLEAR_SITE_DATA: HeaderName = HeaderName::from_static("clear-site-data");

pub const NAME: &str = "berth_port";
/// A signed-in browser's cookie (`api/session_cookie.rs`). The `__Host-` prefix makes the
/// browser refuse it unless it is `Secure`, `Path=/` and host-only: no other host (a port's
/// host name under `base_domain`) can set or overwrite it.
pub const WEB_SESSION: &str = "__Host-berth_session";
/// The session cookie's name before issue 20, still read for sessions made before it.
pub const LEGACY_WEB_SESSION: &str = "berth_session";
/// The query parameter that carries a share link's token.
pub const LINK_PARAM: &str = "berth_link";
/// Share-link cookies tried per request: page script at a port's host name can add ones
/// of the same name (more specific paths come first), and each is a store lookup.
pub const MAX_LINK_COOKIES_TRIED: usize = 8;
/// Session cookies read per request: two already refuse it, a few more say how many.
const MAX_SESSION_COOKIES_READ: usize = 16;

/// `Set-Cookie` for a share link's session token that lives `max_age_s` more seconds, on
/// `path`; `Secure` when served over TLS (never sent over plain HTTP then).
pub fn set_cookie(token: &str, path: &str, max_age_s: i64, over_tls: bool) -> String {
    let secure = if over_tls { "; Secure" } else { "" };
    format!(
        "{NAME}={token}; Path={path}; Max-Age={}; HttpOnly; SameSite=Lax{secure}",
        max_age_s.max(0)
    )
}

/// The share-link session tokens in the request's cookies, the first
/// [`MAX_LINK_COOKIES_TRIED`] (the browser sends the most specific path first).
pub fn session_tokens(headers: &HeaderMap) -> Vec<String> {
    pairs(headers)
        .filter(|(name, _)| *name == NAME)
        .take(MAX_LINK_COOKIES_TRIED)
        .map(|(_, value)| value.to_owned())
        .collect()
}

/// One web session cookie of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSessionCookie {
    /// Sent under [`LEGACY_WEB_SESSION`], the name before issue 20.
    pub legacy: bool,
    pub token: String,
}

/// The web session cookies in the request, under either name (at most a few: more than
/// one is refused anyway).
pub fn web_session_cookies(headers: &HeaderMap) -> Vec<WebSessionCookie> {
    pairs(headers)
        .filter_map(|(name, value)| {
            let legacy = match name {
                WEB_SESSION => false,
                LEGACY_WEB_SESSION => true,
                _ => return None,
            };
            Some(WebSessionCookie {
                legacy,
                token: value.to_owned(),
            })
        })
        .take(MAX_SESSION_COOKIES_READ)
        .collect()
}

/// The `Cookie` header without berth's own cookies (`None`: nothing left to send).
pub fn without_ours(headers: &HeaderMap) -> Option<HeaderValue> {
    let kept: Vec<String> = pairs(headers)
        .filter(|(name, _)| !is_berths(name))
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    if kept.is_empty() {
        return None;
    }
    HeaderValue::from_str(&kept.join("; ")).ok()
}

/// Where a box's app answers: under berth's own origin, or at its port's own host name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// `/v1/boxes/{ref}/ports/{port}/…`: berth's origin, where berth's cookies live.
    ByPath,
    /// `<port>-<box>.<base_domain>`: an origin of the app's own.
    ByHost,
}

/// Takes out of an app's answer what could reach berth's cookies. By path, the answer is
/// on berth's origin: every `Set-Cookie` goes (an app that needs cookies is served by host
/// name), and so does `Clear-Site-Data`, which would sign the browser out of berth. At a
/// port's host name, a cookie naming `Domain=` goes (it would reach sibling hosts, berth's
/// among them when they share a registrable domain), and so does one named like berth's.
pub fn keep_off_berths(headers: &mut HeaderMap, served: Served) {
    if served == Served::ByPath {
        headers.remove(SET_COOKIE);
        headers.remove(CLEAR_SITE_DATA);
        return;
    }
    if !headers.contains_key(SET_COOKIE) {
        return;
    }
    let kept: Vec<HeaderValue> = headers
        .get_all(SET_COOKIE)
        .iter()
        .filter(|value| value.to_str().is_ok_and(allowed_at_port_host))
        .cloned()
        .collect();
    headers.remove(SET_COOKIE);
    for value in kept {
        headers.append(SET_COOKIE, value);
    }
}

/// Whether a `Set-Cookie` stays with the port's own host and names none of berth's
/// cookies, read as a browser reads it (RFC 6265bis §5.6).
fn allowed_at_port_host(set_cookie: &str) -> bool {
    let mut parts = set_cookie.split(';');
    let pair = parts.next().unwrap_or("");
    let (name, value) = match pair.split_once('=') {
        Some((name, value)) => (name.trim(), value.trim()),
        None => ("", pair.trim()),
    };
    // A nameless cookie is sent back as its value alone: `=berth_session=x` reaches a
    // server as `berth_session=x`.
    let sent_as = if name.is_empty() {
        value.split('=').next().unwrap_or("").trim()
    } else {
        name
    };
    if is_berths(name) || is_berths(sent_as) {
        return false;
    }
    !parts.any(|attribute| {
        let key = attribute.split('=').next().unwrap_or("").trim();
        key.eq_ignore_ascii_case("domain")
    })
}

/// Whether `name` is one of berth's cookies, in any case, with or without a `__Host-` or
/// `__Secure-` prefix (browsers differ in how strictly they read prefixes and case).
fn is_berths(name: &str) -> bool {
    let lower = name.trim().to_ascii_lowercase();
    let bare = lower
        .strip_prefix("__host-")
        .or_else(|| lower.strip_prefix("__secure-"))
        .unwrap_or(&lower);
    bare == NAME || bare == LEGACY_WEB_SESSION
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

    fn answer(set_cookies: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in set_cookies {
            headers.append(SET_COOKIE, value.parse().unwrap());
        }
        headers.insert(CLEAR_SITE_DATA, "\"cookies\"".parse().unwrap());
        headers
    }

    fn kept(headers: &HeaderMap) -> Vec<&str> {
        headers
            .get_all(SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    }

    #[test]
    fn ours_is_read_and_taken_out_and_the_apps_are_kept() {
        let mut headers = HeaderMap::new();
        headers.append(COOKIE, "theme=dark; berth_port=bps_1".parse().unwrap());
        headers.append(
            COOKIE,
            "sid=abc; __Host-berth_session=bws_1; berth_session=bws_0; __Secure-BERTH_PORT=x"
                .parse()
                .unwrap(),
        );
        assert_eq!(session_tokens(&headers), ["bps_1"]);
        assert_eq!(
            web_session_cookies(&headers),
            [
                WebSessionCookie {
                    legacy: false,
                    token: "bws_1".into()
                },
                WebSessionCookie {
                    legacy: true,
                    token: "bws_0".into()
                }
            ]
        );
        assert_eq!(without_ours(&headers).unwrap(), "theme=dark; sid=abc");
        let mut only_ours = HeaderMap::new();
        only_ours.insert(COOKIE, "berth_port=bps_1".parse().unwrap());
        assert_eq!(without_ours(&only_ours), None);
    }

    #[test]
    fn share_link_cookies_are_secure_over_tls_and_a_few_are_tried() {
        let set = set_cookie("bps_2", "/v1/boxes/a/ports/80/", 60, false);
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Lax") && set.contains("Max-Age=60")
        );
        assert!(!set.contains("Secure"), "{set}");
        let set = set_cookie("bps_2", "/", 60, true);
        assert!(set.ends_with("; Secure"), "{set}");

        let mut headers = HeaderMap::new();
        let many: Vec<String> = (0..20).map(|i| format!("berth_port=bps_{i}")).collect();
        headers.insert(COOKIE, many.join("; ").parse().unwrap());
        let tried = session_tokens(&headers);
        assert_eq!(tried.len(), MAX_LINK_COOKIES_TRIED);
        assert_eq!(tried[0], "bps_0");
    }

    #[test]
    fn by_path_no_cookie_of_an_app_reaches_the_browser() {
        let mut headers = answer(&["theme=dark; Path=/", "cart=3"]);
        headers.insert("x-app", "1".parse().unwrap());
        keep_off_berths(&mut headers, Served::ByPath);
        assert_eq!(kept(&headers), Vec::<&str>::new());
        assert!(!headers.contains_key(CLEAR_SITE_DATA));
        assert_eq!(headers["x-app"], "1");
    }

    #[test]
    fn at_a_port_host_an_app_keeps_its_own_cookies_only() {
        let mut headers = answer(&[
            "theme=dark; Path=/",
            "sid=1; Domain=boxes.example.com; Path=/",
            "lang=en; path=/; DOMAIN=.example.com",
            "x=1; Path=/; domain",
            "berth_session=bws_a; Path=/v1/",
            "__Host-berth_session=bws_a; Path=/; Secure",
            "__secure-Berth_Session=bws_a; Secure",
            "BERTH_PORT=bps_a",
            " berth_port =bps_a",
            "=berth_session=bws_a",
            "=__Host-berth_session=bws_a",
            "berth_session",
            "cart=3; HttpOnly",
            "berth_sessions=mine",
        ]);
        keep_off_berths(&mut headers, Served::ByHost);
        assert_eq!(
            kept(&headers),
            [
                "theme=dark; Path=/",
                "cart=3; HttpOnly",
                "berth_sessions=mine"
            ]
        );
        // The app's own Clear-Site-Data reaches only its own origin there.
        assert!(headers.contains_key(CLEAR_SITE_DATA));
    }
}
