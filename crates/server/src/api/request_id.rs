//! Every request's id and span. The id is the client's `X-Request-Id` when it is a plain
//! token (at most [`MAX_CHARS`] of `[A-Za-z0-9._-]`, so it cannot forge log fields or
//! lines), else a fresh one; the answer carries it back in `X-Request-Id`. The request's
//! span holds it as `request_id`, and `box_id` once the request finds its box
//! ([`crate::ops::box_find::name_in_span`]): every line logged while serving the request,
//! in lifecycle tasks it waits on too, carries both.

use http::{HeaderMap, HeaderName, HeaderValue};

pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");
/// The longest client id kept.
pub const MAX_CHARS: usize = 64;

/// The request's id: the client's when acceptable, else a fresh `req_<24 hex>`.
pub fn of(headers: &HeaderMap) -> HeaderValue {
    let mut given = headers.get_all(&HEADER).iter();
    match (given.next(), given.next()) {
        (Some(value), None) if acceptable(value.as_bytes()) => value.clone(),
        _ => fresh(),
    }
}

/// The span a request is served in. At error level so that it is on whenever any line is
/// logged (a filter such as `RUST_LOG=warn` would turn an info span off, and the warnings
/// would lose their request): its level decides only whether it exists.
pub fn span(id: &HeaderValue) -> tracing::Span {
    let id = id.to_str().unwrap_or_default();
    tracing::error_span!("request", request_id = %id, box_id = tracing::field::Empty)
}

fn acceptable(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= MAX_CHARS
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn fresh() -> HeaderValue {
    let mut random = [0u8; 12];
    if getrandom::fill(&mut random).is_err() {
        // The OS's random source failed (never in practice): an id unique in this process
        // is what a log needs.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let next = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        random[..8].copy_from_slice(&next.to_be_bytes());
    }
    let id = format!("req_{}", berth_basics::hex(&random));
    HeaderValue::try_from(id).expect("hex is a header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(values: &[&[u8]]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(&HEADER, HeaderValue::from_bytes(value).unwrap());
        }
        headers
    }

    #[test]
    fn a_plain_client_id_is_kept_and_anything_else_replaced() {
        let kept = "ab-C.9_z".repeat(8);
        assert_eq!(kept.len(), MAX_CHARS);
        assert_eq!(of(&with(&[kept.as_bytes()])), kept.as_str());
        for bad in [
            &b""[..],
            "a".repeat(MAX_CHARS + 1).as_bytes(),
            b"a b",
            b"a\"b",
            b"id=1 level=ERROR",
            b"\xc3\xa9t\xc3\xa9",
        ] {
            let id = of(&with(&[bad]));
            assert_ne!(id.as_bytes(), bad);
            assert!(id.to_str().unwrap().starts_with("req_"), "{id:?}");
        }
        let two = of(&with(&[b"one", b"two"]));
        assert!(
            two.to_str().unwrap().starts_with("req_"),
            "two ids: neither"
        );
    }

    #[test]
    fn fresh_ids_are_distinct_and_acceptable() {
        let (a, b) = (of(&HeaderMap::new()), of(&HeaderMap::new()));
        assert_ne!(a, b);
        assert_eq!(a.len(), "req_".len() + 24);
        assert!(acceptable(a.as_bytes()));
    }
}
