//! A sandbox's metadata: the client's own key/value bookkeeping, kept with the sandbox and
//! never read by berth, and the list filter in E2B's query format.
//!
//! The filter is one query parameter, `metadata=<k>=<v>&<k2>=<v2>`, whose keys and values
//! the SDKs percent-encode before encoding the whole again (Python: `urlencode` of
//! `quote`d pairs). E2B's API unescapes the whole parameter once more and then parses it as
//! a query string, so a key or value may hold `&`, `=` or any byte; berth reads it the same
//! way.

use std::collections::BTreeMap;

use crate::e2b::error::E2bError;

/// At most this many entries.
pub const MAX_ENTRIES: usize = 64;
/// A key's longest, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// A value's longest, in bytes.
pub const MAX_VALUE_BYTES: usize = 1024;
/// The longest filter berth reads.
const MAX_FILTER_BYTES: usize = 16 * 1024;

/// Checks metadata given at creation.
pub fn validate(metadata: &BTreeMap<String, String>) -> Result<(), E2bError> {
    if metadata.len() > MAX_ENTRIES {
        return Err(E2bError::InvalidMetadata {
            key: format!("({} entries)", metadata.len()),
            rule: "a sandbox has at most 64 metadata entries",
        });
    }
    for (key, value) in metadata {
        let rule = if key.is_empty() || key.len() > MAX_KEY_BYTES {
            Some("a key has 1 to 256 bytes")
        } else if value.len() > MAX_VALUE_BYTES {
            Some("a value has at most 1024 bytes")
        } else if key.chars().chain(value.chars()).any(char::is_control) {
            Some("keys and values hold no control characters")
        } else {
            None
        };
        if let Some(rule) = rule {
            return Err(E2bError::InvalidMetadata {
                key: key.escape_debug().take(64).collect(),
                rule,
            });
        }
    }
    Ok(())
}

/// The pairs of a `metadata` query parameter (as axum decoded it), every one of which a
/// listed sandbox must have.
pub fn parse_filter(param: &str) -> Result<Vec<(String, String)>, E2bError> {
    let bad = |rule| E2bError::InvalidQuery {
        param: "metadata",
        rule,
    };
    if param.len() > MAX_FILTER_BYTES {
        return Err(bad("the filter is longer than 16 KiB"));
    }
    let once = unescape(param).ok_or_else(|| bad("a `%` is not followed by two hex digits"))?;
    let pairs = form_urlencoded::parse(&once)
        .filter(|(key, _)| !key.is_empty())
        .map(|(key, value)| (key.into_owned(), value.into_owned()))
        .collect::<Vec<_>>();
    if pairs.len() > MAX_ENTRIES {
        return Err(bad("a filter names at most 64 entries"));
    }
    Ok(pairs)
}

/// Whether `metadata` has every pair of `filter`.
pub fn matches(metadata: &BTreeMap<String, String>, filter: &[(String, String)]) -> bool {
    filter
        .iter()
        .all(|(key, value)| metadata.get(key) == Some(value))
}

/// `text` with `%XX` decoded and `+` as a space (Go's `url.QueryUnescape`); `None` for a
/// `%` without two hex digits after it.
fn unescape(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_python_sdks_encoding_reads_back_with_every_odd_byte() {
        // What `SandboxPaginator.next_items` makes of {"user id": "a&b=c", "app": "50%+"}:
        // urlencode({quote(k): quote(v)}), which the HTTP layer encodes again and axum
        // decodes once.
        let sent = "user%2520id=a%2526b%253Dc&app=50%2525%252B";
        let pairs = parse_filter(sent).unwrap();
        assert_eq!(
            pairs,
            vec![
                ("user id".to_owned(), "a&b=c".to_owned()),
                ("app".to_owned(), "50%+".to_owned())
            ]
        );
        let metadata = map(&[("user id", "a&b=c"), ("app", "50%+"), ("x", "y")]);
        assert!(matches(&metadata, &pairs));
        assert!(!matches(&map(&[("user id", "a&b=c")]), &pairs));
        assert!(matches(&metadata, &parse_filter("").unwrap()));
    }

    #[test]
    fn a_broken_escape_or_oversized_metadata_is_refused() {
        assert!(parse_filter("a=%2").is_err());
        assert!(parse_filter("a=%zz").is_err());
        assert!(parse_filter(&"a".repeat(MAX_FILTER_BYTES + 1)).is_err());
        assert!(validate(&map(&[("", "v")])).is_err());
        assert!(validate(&map(&[("k", "line\nbreak")])).is_err());
        let long = "v".repeat(MAX_VALUE_BYTES + 1);
        assert!(validate(&map(&[("k", &long)])).is_err());
        let many: BTreeMap<String, String> = (0..=MAX_ENTRIES)
            .map(|i| (format!("k{i}"), "v".to_owned()))
            .collect();
        assert!(validate(&many).is_err());
        assert!(validate(&map(&[("userId", "ada"), ("env", "prod")])).is_ok());
    }
}
