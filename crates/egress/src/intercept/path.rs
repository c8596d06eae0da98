//! Request paths as a credential rule's `paths` compares them. A rule restricted to
//! `/v1/messages` must not be steered elsewhere by a path the upstream reads differently
//! than the gateway: `/v1/messages/../admin`, `/v1/messages/%2e%2e/admin`, `/v1/messages;x`,
//! `/v1/messages//x`. Such paths are not guessed at: they are *ambiguous*, and no secret is
//! set on them. Unreserved characters written as escapes (`%61` for `a`) are decoded, as
//! every server does, so `/v1/mess%61ges` is `/v1/messages`.

/// Escaped bytes that change how a server splits or resolves a path: `.`, `/`, `\`, `%`,
/// `;`, `?`, `#`, and control bytes.
fn dangerous_escape(b: u8) -> bool {
    matches!(b, b'.' | b'/' | b'\\' | b'%' | b';' | b'?' | b'#') || b < 0x20 || b == 0x7f
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~')
}

/// The path of an origin-form request target (the query cut off), normalised; `None` when
/// it is ambiguous.
pub fn normalise(target: &str) -> Option<String> {
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    if !path.starts_with('/') {
        return None;
    }
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                let byte = u8::from_str_radix(hex, 16).ok()?;
                if dangerous_escape(byte) {
                    return None;
                }
                if unreserved(byte) {
                    out.push(char::from(byte));
                } else {
                    out.push_str(&format!("%{byte:02X}"));
                }
                i += 3;
            }
            b'\\' | b';' | b'#' => return None,
            0x21..=0x7e => {
                out.push(char::from(b));
                i += 1;
            }
            _ => return None,
        }
    }
    // Segments: no empty one (`//`) except a trailing slash, no `.` or `..`.
    let segments: Vec<&str> = out[1..].split('/').collect();
    let last = segments.len() - 1;
    for (n, segment) in segments.iter().enumerate() {
        if (segment.is_empty() && n != last) || *segment == "." || *segment == ".." {
            return None;
        }
    }
    Some(out)
}

/// A rule's path prefix in normal form (no trailing slash but for `/`); `None` when it
/// is not a clean absolute path (no query, escapes, `//`, `.` or `..` segments).
pub fn prefix(p: &str) -> Option<String> {
    if p.contains(['?', '%']) {
        return None;
    }
    let n = normalise(p)?;
    if n.len() > 1 {
        Some(n.trim_end_matches('/').to_owned())
    } else {
        Some(n)
    }
}

/// Whether normalised `path` is `prefix` or below it (on a segment boundary: `/v1/messages`
/// covers `/v1/messages/batches`, not `/v1/messagesX`).
pub fn under(path: &str, prefix: &str) -> bool {
    if prefix == "/" {
        return true;
    }
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_paths_normalise() {
        assert_eq!(
            normalise("/v1/messages?beta=true").as_deref(),
            Some("/v1/messages")
        );
        assert_eq!(normalise("/v1/mess%61ges").as_deref(), Some("/v1/messages"));
        assert_eq!(normalise("/a%20b/").as_deref(), Some("/a%20b/"));
        assert_eq!(normalise("/a%c3%a9").as_deref(), Some("/a%C3%A9"));
    }

    #[test]
    fn ambiguous_paths_are_refused() {
        for bad in [
            "/v1/messages/../admin",
            "/v1/messages/./x",
            "/v1/messages/%2e%2e/admin",
            "/v1/messages/%2E%2e",
            "/v1/messages%2fx",
            "/v1//messages",
            "/v1/messages;/../admin",
            "/v1/messages\\..\\admin",
            "/v1/messages%00",
            "/v1/messages%25",
            "/v1/messages%zz",
            "/v1/messages%4",
            "*",
            "http://x/v1/messages",
        ] {
            assert_eq!(normalise(bad), None, "{bad}");
        }
    }

    #[test]
    fn prefixes_match_on_segment_boundaries() {
        let p = prefix("/v1/messages/").unwrap();
        assert_eq!(p, "/v1/messages");
        assert!(under("/v1/messages", &p));
        assert!(under("/v1/messages/", &p));
        assert!(under("/v1/messages/batches", &p));
        assert!(!under("/v1/messagesX", &p));
        assert!(!under("/v1", &p));
        assert!(under("/anything", &prefix("/").unwrap()));
        for bad in ["v1", "/v1?x", "/v1/../x", "/a%20b", ""] {
            assert_eq!(prefix(bad), None, "{bad}");
        }
    }
}
