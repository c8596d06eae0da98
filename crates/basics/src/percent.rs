//! Percent-encoding of what clients put in an API URL: a box's name in a path, a file's path
//! in a query (`berth` CLI, the MCP tools).

/// Percent-encodes a path segment (a box name or id) for use in a URL path.
pub fn path_segment(raw: &str) -> String {
    percent_encode(raw, b"-._~")
}

/// Percent-encodes a query value; `/` is left as is for readable logs.
pub fn query_value(raw: &str) -> String {
    percent_encode(raw, b"-._~/")
}

fn percent_encode(raw: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    for &b in raw.as_bytes() {
        if b.is_ascii_alphanumeric() || keep.contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_keeps_safe_bytes_and_escapes_the_rest() {
        assert_eq!(
            query_value("/home/user/a b&c=d%.txt"),
            "/home/user/a%20b%26c%3Dd%25.txt"
        );
        assert_eq!(path_segment("alice"), "alice");
        assert_eq!(path_segment("a/b?"), "a%2Fb%3F");
        assert_eq!(query_value("é"), "%C3%A9");
    }
}
