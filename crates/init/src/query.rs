//! Parsing the `files` query string into a [`FileQuery`].
//!
//! Keys: `path` (percent-encoded, required), `user` (`user`|`root`), `recursive` (also
//! accepted as `parents`, the name in the protocol's call table), `mode` (decimal, or
//! octal with a `0o` prefix). Unknown keys are ignored (lenient inside). `+` is kept
//! literally: the host client percent-encodes spaces.

use berth_protocol::guest::{BoxUser, FileQuery, WriteMode};

use crate::error::ApiError;

/// Parses and validates a `files` query; the path must be absolute and contain no NUL.
pub fn file_query(raw: Option<&str>) -> Result<FileQuery, ApiError> {
    let mut q = FileQuery::default();
    let mut path = None;
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = decode(value).ok_or(ApiError::BadQuery {
            name: "query",
            reason: "bad percent-encoding",
        })?;
        match key {
            "path" => path = Some(value),
            "user" => {
                q.user = match value.as_str() {
                    "user" | "" => BoxUser::User,
                    "root" => BoxUser::Root,
                    _ => {
                        return Err(ApiError::BadQuery {
                            name: "user",
                            reason: "must be user or root",
                        })
                    }
                }
            }
            "recursive" | "parents" => q.recursive = flag("recursive", &value)?,
            "mode" => q.mode = Some(mode(&value)?),
            _ => {}
        }
    }
    let path = path.ok_or(ApiError::BadQuery {
        name: "path",
        reason: "missing",
    })?;
    q.path = checked_path(path)?;
    Ok(q)
}

/// A path the box's file calls take: absolute, without NUL.
pub fn checked_path(path: String) -> Result<String, ApiError> {
    if !path.starts_with('/') || path.contains('\0') {
        return Err(ApiError::BadPath { path });
    }
    Ok(path)
}

/// The `after` of `GET /v1/events` (a seq; absent means 0).
pub fn after_query(raw: Option<&str>) -> Result<u64, ApiError> {
    Ok(number(raw, "after", "must be a sequence number")?.unwrap_or(0))
}

/// The `offset` of a terminal attachment, if given.
pub fn offset_query(raw: Option<&str>) -> Result<Option<u64>, ApiError> {
    number(raw, "offset", "must be a byte offset")
}

/// The `close` of a stdin write (absent: false).
pub fn close_query(raw: Option<&str>) -> Result<bool, ApiError> {
    switch(raw, "close")
}

/// The `follow` of a process start (absent: false).
pub fn follow_query(raw: Option<&str>) -> Result<bool, ApiError> {
    switch(raw, "follow")
}

/// How a file write lands: `in_place=true`, else atomically.
pub fn write_mode(raw: Option<&str>) -> Result<WriteMode, ApiError> {
    Ok(match switch(raw, "in_place")? {
        true => WriteMode::InPlace,
        false => WriteMode::Atomic,
    })
}

/// The flag named `name` in a query: `name`, `name=true` or `name=1` (the last one given;
/// absent: false).
fn switch(raw: Option<&str>, name: &'static str) -> Result<bool, ApiError> {
    let mut on = false;
    for pair in raw.unwrap_or("").split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key == name {
            on = flag(name, value)?;
        }
    }
    Ok(on)
}

/// The number named `name` in a query (the last one given).
fn number(
    raw: Option<&str>,
    name: &'static str,
    reason: &'static str,
) -> Result<Option<u64>, ApiError> {
    let mut found = None;
    for pair in raw.unwrap_or("").split('&') {
        if let Some(value) = pair.strip_prefix(name).and_then(|v| v.strip_prefix('=')) {
            found = Some(
                value
                    .parse()
                    .map_err(|_| ApiError::BadQuery { name, reason })?,
            );
        }
    }
    Ok(found)
}

fn flag(name: &'static str, value: &str) -> Result<bool, ApiError> {
    match value {
        "true" | "1" | "" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(ApiError::BadQuery {
            name,
            reason: "must be true or false",
        }),
    }
}

fn mode(value: &str) -> Result<u32, ApiError> {
    let parsed = match value.strip_prefix("0o") {
        Some(octal) => u32::from_str_radix(octal, 8),
        None => value.parse(),
    };
    match parsed {
        Ok(m) if m <= 0o7777 => Ok(m),
        _ => Err(ApiError::BadQuery {
            name: "mode",
            reason: "must be permission bits up to 0o7777",
        }),
    }
}

/// Percent-decodes `s`; `None` for a bad escape or bytes that are not UTF-8.
fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_and_validate() {
        let q = file_query(Some(
            "path=/home/user/a%20b%26c&user=root&recursive=true&mode=493&x=1",
        ))
        .unwrap();
        assert_eq!(q.path, "/home/user/a b&c");
        assert_eq!(q.user, BoxUser::Root);
        assert!(q.recursive);
        assert_eq!(q.mode, Some(0o755));
        assert_eq!(
            file_query(Some("path=/a&parents=1&mode=0o600"))
                .unwrap()
                .mode,
            Some(0o600)
        );
        assert_eq!(file_query(Some("path=/a")).unwrap().user, BoxUser::User);
    }

    #[test]
    fn bad_paths_and_values_are_invalid_requests() {
        for raw in [
            "path=relative",
            "path=/a%00b",
            "user=user",
            "path=/a&user=bob",
            "path=/a%zz",
            "path=/a&mode=99999",
        ] {
            let err = file_query(Some(raw)).unwrap_err();
            assert_eq!(
                err.code(),
                berth_protocol::ErrorCode::InvalidRequest,
                "{raw}"
            );
        }
        assert!(matches!(
            file_query(Some("path=/a%00")),
            Err(ApiError::BadPath { .. })
        ));
        assert!(file_query(None).is_err());
    }

    #[test]
    fn switches_are_true_false_or_refused() {
        assert!(!follow_query(None).unwrap());
        assert!(follow_query(Some("follow")).unwrap());
        assert!(follow_query(Some("follow=true")).unwrap());
        assert!(!follow_query(Some("follow=1&follow=false")).unwrap());
        // Another key that starts with the name is not the switch.
        assert!(!close_query(Some("closed=1")).unwrap());
        let err = follow_query(Some("follow=yes")).unwrap_err();
        assert_eq!(err.code(), berth_protocol::ErrorCode::InvalidRequest);
    }
}
