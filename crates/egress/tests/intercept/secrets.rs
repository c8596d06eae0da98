use crate::fixture::{
    decode_response, first_event, get, provider, Harness, TestCa, Upstream, API, AUTH, AUTH_PH,
    AUTH_SECRET, KEY_PH, KEY_SECRET, PLAIN,
};
use berth_egress::gateway::{
    BoxEgress, Gateway, GatewayConfig, MemorySink, StaticResolver, Verdict, Via,
};
use berth_egress::intercept::{BoxCa, CredentialRule, InterceptConfig, Interceptor};
use berth_egress::policy::Allowlist;
use berth_protocol::BoxId;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::oneshot;
use tokio_rustls::TlsConnector;

#[tokio::test]
async fn the_placeholder_becomes_the_real_secret_upstream() {
    let mut h = Harness::start().await;
    let mut tls = h.tls(API, false).await;
    // The box offered h2 and http/1.1; the gateway speaks only the latter.
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    tls.write_all(get(API, &format!("X-Api-Key: {KEY_PH}\r\n")).as_bytes())
        .await
        .unwrap();
    let mut raw = Vec::new();
    tls.read_to_end(&mut raw).await.unwrap();
    let (back, body) = decode_response(&raw);
    assert!(back.starts_with("HTTP/1.1 200 OK\r\n"), "{back}");
    assert_eq!(body, b"ok", "{back}");
    assert!(back.contains("connection: close\r\n"), "{back}");
    assert!(!back.contains("keep-alive"), "{back}");

    let head = h.upstream.heads.recv().await.unwrap();
    assert!(
        head.contains(&format!("x-api-key: {KEY_SECRET}\r\n")),
        "{head}"
    );
    assert!(!head.contains(KEY_PH), "{head}");
    assert!(head.contains("connection: close\r\n"), "{head}");

    let records = h.audit(1).await;
    let r = &records[0];
    assert_eq!(r.decision, Verdict::Allow);
    assert!(r.intercept);
    assert_eq!(r.credential.as_deref(), Some("anthropic"));
    assert_eq!(r.target.as_deref(), Some(API));
    assert!(r.bytes_up > 0 && r.bytes_down > 0, "{r:?}");
    let line = serde_json::to_string(r).unwrap();
    assert!(line.contains("\"intercept\":true"), "{line}");
    h.shutdown().await;
}

#[tokio::test]
async fn bearer_placeholder_in_authorization_and_through_connect() {
    let mut h = Harness::start().await;
    let mut tls = h.tls(AUTH, true).await;
    tls.write_all(get(AUTH, &format!("authorization: Bearer {AUTH_PH}\r\n")).as_bytes())
        .await
        .unwrap();
    let mut back = String::new();
    tls.read_to_string(&mut back).await.unwrap();
    assert!(back.starts_with("HTTP/1.1 200 OK"), "{back}");
    let head = h.upstream.heads.recv().await.unwrap();
    assert!(
        head.contains(&format!("authorization: {AUTH_SECRET}\r\n")),
        "{head}"
    );
    assert!(!head.contains(AUTH_PH), "{head}");
    let r = &h.audit(1).await[0];
    assert_eq!(r.via, Some(Via::Connect));
    assert_eq!(r.credential.as_deref(), Some("github"));
    h.shutdown().await;
}

#[tokio::test]
async fn client_credentials_are_stripped() {
    let mut h = Harness::start().await;
    let extra = "Authorization: Bearer box-made-this\r\nCOOKIE: session=box\r\nProxy-Authorization: Basic eA==\r\nx-api-key: not-the-placeholder\r\nX-Other: kept\r\n";
    let back = h.request(API, &get(API, extra)).await;
    assert!(back.starts_with("HTTP/1.1 200 OK"), "{back}");
    let head = h.upstream.heads.recv().await.unwrap();
    let lower = head.to_ascii_lowercase();
    for gone in [
        "authorization",
        "cookie",
        "x-api-key",
        "box-made-this",
        KEY_SECRET,
    ] {
        assert!(
            !lower.contains(&gone.to_ascii_lowercase()),
            "{gone} in {head}"
        );
    }
    assert!(head.contains("X-Other: kept\r\n"), "{head}");
    let r = &h.audit(1).await[0];
    assert_eq!(
        (r.decision, r.intercept, r.credential.as_deref()),
        (Verdict::Allow, true, None)
    );
    h.shutdown().await;
}

#[tokio::test]
async fn placeholder_to_a_host_without_the_rule_reaches_it_unchanged() {
    let mut h = Harness::start().await;
    let back = h
        .request(PLAIN, &get(PLAIN, &format!("x-api-key: {KEY_PH}\r\n")))
        .await;
    assert!(back.starts_with("HTTP/1.1 200 OK"), "{back}");
    // Passthrough: the upstream's own keep-alive header comes back untouched.
    assert!(back.contains("connection: keep-alive"), "{back}");
    let head = h.upstream.heads.recv().await.unwrap();
    assert!(head.contains(&format!("x-api-key: {KEY_PH}\r\n")), "{head}");
    assert!(!head.contains(KEY_SECRET), "{head}");
    let r = &h.audit(1).await[0];
    assert_eq!((r.decision, r.intercept), (Verdict::Allow, false));
    h.shutdown().await;
}

#[tokio::test]
async fn trace_is_refused_and_never_reaches_upstream() {
    let mut h = Harness::start().await;
    for method in ["TRACE", "TRACK"] {
        let req = format!("{method} / HTTP/1.1\r\nHost: {API}\r\nx-api-key: {KEY_PH}\r\n\r\n");
        let back = h.request(API, &req).await;
        assert!(back.starts_with("HTTP/1.1 405 "), "{back}");
    }
    let records = h.audit(2).await;
    for r in &records {
        assert_eq!(r.decision, Verdict::Deny);
        assert_eq!(r.reason.as_deref(), Some("method_refused"));
        assert!(r.intercept);
    }
    // Every refused request is audited only after the gateway is done with it; nothing
    // was ever sent upstream.
    assert!(h.upstream.heads.try_recv().is_err());
    h.shutdown().await;
}

#[tokio::test]
async fn host_other_than_sni_gets_421() {
    let mut h = Harness::start().await;
    let back = h
        .request(API, &get(PLAIN, &format!("x-api-key: {KEY_PH}\r\n")))
        .await;
    assert!(back.starts_with("HTTP/1.1 421 "), "{back}");
    let r = &h.audit(1).await[0];
    assert_eq!(r.decision, Verdict::Deny);
    assert_eq!(r.reason.as_deref(), Some("host_mismatch"));
    assert!(h.upstream.heads.try_recv().is_err());
    h.shutdown().await;
}

#[tokio::test]
async fn sse_events_arrive_as_they_are_sent() {
    let h = Harness::start().await;
    let mut tls = h.tls(API, false).await;
    tls.write_all(
        format!("GET /sse HTTP/1.1\r\nHost: {API}\r\nAccept: text/event-stream\r\nx-api-key: {KEY_PH}\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    // The upstream holds the second event until released: the first must arrive alone.
    let mut got = first_event(&mut tls).await;
    let text = String::from_utf8(got.clone()).unwrap();
    assert!(text.contains("content-type: text/event-stream"), "{text}");
    assert!(!text.contains("two"));
    h.upstream.release.send(()).unwrap();
    tls.read_to_end(&mut got).await.unwrap();
    let (_, body) = decode_response(&got);
    assert_eq!(
        body,
        b"event: ping\ndata: one\n\nevent: ping\ndata: two\n\n"
    );
    let r = &h.audit(1).await[0];
    assert_eq!((r.decision, r.intercept), (Verdict::Allow, true));
    h.shutdown().await;
}

#[tokio::test]
async fn upstream_certificate_must_chain_to_a_trusted_root() {
    // A gateway whose interceptor does not trust the test CA refuses the upstream.
    let public = TestCa::new();
    let mut upstream = Upstream::start(&public).await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("egress.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let sink = Arc::new(MemorySink::new());
    let gateway = Gateway::new(
        GatewayConfig {
            resolve_overrides: [(API.to_string(), upstream.addr)].into_iter().collect(),
            ..GatewayConfig::default()
        },
        Arc::new(StaticResolver {
            answers: HashMap::new(),
        }),
        sink.clone(),
    )
    .unwrap();
    let box_id = BoxId::from_random([6; 20]);
    let ca = BoxCa::new(&box_id).unwrap();
    let box_ca = ca.cert_der();
    let rules =
        vec![CredentialRule::new("anthropic", &[API], "x-api-key", KEY_PH, KEY_SECRET).unwrap()];
    let interceptor = Arc::new(Interceptor::new(ca, InterceptConfig::new(rules)).unwrap());
    let egress = BoxEgress {
        box_id,
        allow: Allowlist::new(&[API.to_string()]).unwrap(),
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(async move {
        gateway
            .serve_box_intercepting(listener, egress, interceptor, async {
                let _ = stopped.await;
            })
            .await
    });
    let s = UnixStream::connect(&socket).await.unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(box_ca).unwrap();
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(API).unwrap(), s)
        .await
        .unwrap();
    tls.write_all(get(API, &format!("x-api-key: {KEY_PH}\r\n")).as_bytes())
        .await
        .unwrap();
    let mut back = String::new();
    tls.read_to_string(&mut back).await.unwrap();
    assert!(back.starts_with("HTTP/1.1 502 "), "{back}");
    let records = sink.wait_for(1).await;
    assert_eq!(records[0].reason.as_deref(), Some("upstream_tls"));
    assert!(upstream.heads.try_recv().is_err());
    let _ = stop.send(());
    served.await.unwrap();
}

#[tokio::test]
async fn exactly_one_body_goes_up_and_a_pipelined_request_does_not() {
    let mut h = Harness::start().await;
    let smuggled = format!("TRACE / HTTP/1.1\r\nHost: {API}\r\n\r\n");
    let req = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {API}\r\nx-api-key: {KEY_PH}\r\nContent-Length: 11\r\n\r\nhello world{smuggled}"
    );
    let back = h.request(API, &req).await;
    assert!(back.starts_with("HTTP/1.1 200 OK"), "{back}");
    let head = h.upstream.heads.recv().await.unwrap();
    assert!(head.contains(KEY_SECRET), "{head}");
    let (body, rest) = h.upstream.bodies.recv().await.unwrap();
    assert_eq!(body, b"hello world");
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));

    let chunked = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {API}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n{smuggled}"
    );
    let back = h.request(API, &chunked).await;
    assert!(back.starts_with("HTTP/1.1 200 OK"), "{back}");
    let _ = h.upstream.heads.recv().await.unwrap();
    let (body, rest) = h.upstream.bodies.recv().await.unwrap();
    assert_eq!(body, b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));

    let ambiguous = format!(
        "POST / HTTP/1.1\r\nHost: {API}\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n"
    );
    let back = h.request(API, &ambiguous).await;
    assert!(back.starts_with("HTTP/1.1 400 "), "{back}");
    let records = h.audit(3).await;
    assert_eq!(records[2].reason.as_deref(), Some("bad_request"));
    h.shutdown().await;
}
