//! Percent-encoding of what clients put in an API URL: a box's name in a path, a file's path
//! in a query (`berth` CLI, the MCP tools), and its decoding where the daemon reads a raw
//! path itself (an API replica routing a call to a box's node).

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

/// Decodes `%XX` escapes; a `%` not followed by two hex digits stays as it is, and bytes
/// that are not UTF-8 become U+FFFD.
pub fn percent_decode(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| raw.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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

    #[test]
    fn decoding_undoes_encoding_and_leaves_a_stray_percent() {
        for raw in ["alice", "a b&c=d%.txt", "é/x?"] {
            assert_eq!(percent_decode(&query_value(raw)), raw);
        }
        assert_eq!(percent_decode("al%69ce"), "alice");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }
}
