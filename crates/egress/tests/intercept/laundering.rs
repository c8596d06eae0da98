use crate::fixture::{
    contains, decode_response, exchange, first_event, Harness, API, AUTH, AUTH_PH, AUTH_SECRET,
    KEY_PH, KEY_SECRET,
};
use berth_egress::gateway::Verdict;
use berth_egress::intercept::CredentialRule;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn an_echoing_upstream_hands_the_box_only_the_placeholder() {
    let mut h = Harness::start().await;
    for kind in ["-chunked", "-length", "-close"] {
        for (host, header, ph, secret, token) in [
            (API, "x-api-key", KEY_PH, KEY_SECRET, KEY_SECRET),
            (
                AUTH,
                "authorization",
                AUTH_PH,
                AUTH_SECRET,
                "gh-real-secret-abcdef",
            ),
        ] {
            let value = if header == "authorization" {
                format!("Bearer {ph}")
            } else {
                ph.to_owned()
            };
            let req =
                format!("GET /echo{kind} HTTP/1.1\r\nHost: {host}\r\n{header}: {value}\r\n\r\n");
            let back = exchange(&h, host, &req).await;
            let sent = h.upstream.heads.recv().await.unwrap();
            assert!(sent.contains(secret), "the secret went up: {sent}");
            let (head, body) = decode_response(&back);
            assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
            for (what, bytes) in [
                ("head", head.as_bytes()),
                ("body", body.as_slice()),
                ("raw", back.as_slice()),
            ] {
                assert!(
                    !contains(bytes, token),
                    "{kind} {host}: the secret reached the box in the {what}: {}",
                    String::from_utf8_lossy(bytes)
                );
            }
            assert!(contains(head.as_bytes(), ph), "{head}");
            assert!(contains(&body, ph), "{}", String::from_utf8_lossy(&body));
            assert!(
                body.starts_with(b"GET /echo"),
                "the rest of the body is intact: {}",
                String::from_utf8_lossy(&body)
            );
            assert!(
                sent.to_ascii_lowercase()
                    .contains("accept-encoding: identity\r\n"),
                "upstream is asked for an unencoded response: {sent}"
            );
        }
    }
    h.shutdown().await;
}

#[tokio::test]
async fn an_echoed_secret_in_an_event_stream_is_replaced_and_events_still_stream() {
    let mut h = Harness::start().await;
    let mut tls = h.tls(API, false).await;
    tls.write_all(
        format!("GET /echo-sse HTTP/1.1\r\nHost: {API}\r\nx-api-key: {KEY_PH}\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut got = first_event(&mut tls).await;
    assert!(
        !contains(&got, KEY_SECRET),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert!(contains(&got, KEY_PH), "{}", String::from_utf8_lossy(&got));
    h.upstream.release.send(()).unwrap();
    tls.read_to_end(&mut got).await.unwrap();
    let (_, body) = decode_response(&got);
    assert!(body.ends_with(b"data: one\n\nevent: ping\ndata: two\n\n"));
    assert!(!contains(&body, KEY_SECRET));
    let _ = h.upstream.heads.recv().await;
    h.shutdown().await;
}

#[tokio::test]
async fn an_encoded_response_that_could_hide_the_secret_is_refused() {
    let mut h = Harness::start().await;
    let req = format!("GET /echo-gzip HTTP/1.1\r\nHost: {API}\r\nx-api-key: {KEY_PH}\r\nAccept-Encoding: gzip, br\r\n\r\n");
    let back = exchange(&h, API, &req).await;
    let text = String::from_utf8_lossy(&back);
    assert!(text.starts_with("HTTP/1.1 502 "), "{text}");
    assert!(!contains(&back, KEY_SECRET), "{text}");
    let sent = h.upstream.heads.recv().await.unwrap();
    assert!(
        !sent.to_ascii_lowercase().contains("accept-encoding: gzip"),
        "{sent}"
    );
    let r = &h.audit(1).await[0];
    assert_eq!(r.decision, Verdict::Deny);
    assert_eq!(r.reason.as_deref(), Some("encoded_response"));
    h.shutdown().await;
}

// ---- a rule's methods and paths ----------------------------------------------------------

#[tokio::test]
async fn the_secret_goes_only_to_the_rules_methods_and_paths() {
    let restricted = CredentialRule::new("anthropic", &[API], "x-api-key", KEY_PH, KEY_SECRET)
        .unwrap()
        .restricted(&["POST"], &["/v1/messages"])
        .unwrap();
    let mut h = Harness::start_with(vec![restricted]).await;
    // (method and target, whether the secret goes up, the audit's reason if withheld)
    let cases = [
        ("POST /v1/messages", true, None),
        ("POST /v1/messages/batches?beta=true", true, None),
        ("POST /v1/mess%61ges", true, None),
        ("GET /v1/messages", false, Some("method")),
        ("post /v1/messages", false, Some("method")),
        ("POST /v1/messagesX", false, Some("path")),
        ("POST /v1/models?p=/v1/messages", false, Some("path")),
        ("POST /v1/messages/../admin", false, Some("path_ambiguous")),
        (
            "POST /v1/messages/%2e%2e/admin",
            false,
            Some("path_ambiguous"),
        ),
        (
            "POST /v1/messages/%2E%2E%2Fadmin",
            false,
            Some("path_ambiguous"),
        ),
        ("POST /v1/messages//admin", false, Some("path_ambiguous")),
        (
            "POST /v1/messages;x=/../../admin",
            false,
            Some("path_ambiguous"),
        ),
    ];
    for (n, (request_line, injected, reason)) in cases.iter().enumerate() {
        let req = format!(
            "{request_line} HTTP/1.1\r\nHost: {API}\r\nx-api-key: {KEY_PH}\r\nContent-Length: 0\r\n\r\n"
        );
        let back = exchange(&h, API, &req).await;
        assert!(back.starts_with(b"HTTP/1.1 200 OK"), "{request_line}");
        let head = h.upstream.heads.recv().await.unwrap();
        assert_eq!(
            head.contains(KEY_SECRET),
            *injected,
            "{request_line}: {head}"
        );
        if !injected {
            assert!(
                head.contains(&format!("x-api-key: {KEY_PH}\r\n")),
                "{request_line}: the placeholder goes on unchanged: {head}"
            );
        }
        let r = &h.audit(n + 1).await[n];
        assert_eq!(r.decision, Verdict::Allow, "{request_line}");
        assert_eq!(
            r.credential.as_deref(),
            injected.then_some("anthropic"),
            "{request_line}"
        );
        assert_eq!(
            r.withheld.as_ref().map(|w| (w.rule.as_str(), w.reason)),
            reason.map(|why| ("anthropic", why)),
            "{request_line}"
        );
    }
    h.shutdown().await;
}
