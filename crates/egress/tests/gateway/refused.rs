use crate::fixture::{
    assert_deny, connect_head, expect_closed, expect_closed_without_eof, Hello, Setup, Upstream,
    API,
};
use berth_egress::gateway::{
    Gateway, GatewayConfig, GatewayError, MemorySink, StaticResolver, Verdict, Via,
};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn not_allowed_host_is_refused_and_logged() {
    let up = Upstream::start(1).await;
    let h = Setup::new(Some(&up)).start();
    let mut s = h.connect().await;
    s.write_all(&Hello::sni("evil.example.test").bytes())
        .await
        .unwrap();
    expect_closed(&mut s).await;
    let mut s = h.connect().await;
    let head = connect_head(&mut s, "evil.example.test:443").await;
    assert!(head.starts_with("HTTP/1.1 403 "), "{head}");
    expect_closed(&mut s).await;
    let records = h.sink.wait_for(2).await;
    for (r, via) in records.iter().zip([Via::Direct, Via::Connect]) {
        assert_deny(r, "not_allowed");
        assert_eq!(r.target.as_deref(), Some("evil.example.test"));
        assert_eq!(r.via, Some(via));
        assert_eq!(r.resolved, None);
    }
    assert_eq!(up.accepted.load(Ordering::SeqCst), 0);
    h.shutdown().await;
}

#[tokio::test]
async fn connect_to_other_ports_is_refused() {
    let up = Upstream::start(1).await;
    let h = Setup::new(Some(&up)).start();
    for port in [80u16, 22, 8443] {
        let mut s = h.connect().await;
        let head = connect_head(&mut s, &format!("{API}:{port}")).await;
        assert!(head.starts_with("HTTP/1.1 403 "), "{head}");
        expect_closed(&mut s).await;
    }
    let records = h.sink.wait_for(3).await;
    for (r, port) in records.iter().zip([80u16, 22, 8443]) {
        assert_deny(r, "port");
        assert_eq!(r.port, Some(port));
    }
    assert_eq!(up.accepted.load(Ordering::SeqCst), 0);
    h.shutdown().await;
}

#[tokio::test]
async fn sni_different_from_connect_host_is_refused() {
    let up = Upstream::start(1).await;
    let mut setup = Setup::new(Some(&up));
    // The SNI names another allowed host that also resolves fine: the mismatch alone refuses.
    // (The override key is spelled oddly on purpose: the gateway canonicalises it.)
    setup.overrides.insert("B.Wild.Test.".into(), up.addr);
    let h = setup.start();
    let mut s = h.connect().await;
    let head = connect_head(&mut s, "api.example.test:443").await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    s.write_all(&Hello::sni("b.wild.test").bytes())
        .await
        .unwrap();
    expect_closed(&mut s).await;
    let records = h.sink.wait_for(1).await;
    assert_deny(&records[0], "sni_mismatch");
    assert_eq!(records[0].target.as_deref(), Some(API));
    assert_eq!(up.accepted.load(Ordering::SeqCst), 0);
    h.shutdown().await;
}

#[tokio::test]
async fn names_resolving_to_forbidden_addresses_are_refused() {
    let cases: [(&str, &str); 5] = [
        ("lo.bad.test", "127.0.0.1"),
        ("ten.bad.test", "10.0.0.1"),
        ("meta.bad.test", "169.254.169.254"),
        ("mapped.bad.test", "::ffff:127.0.0.1"),
        ("ula.bad.test", "fd00:ec2::254"),
    ];
    let mut setup = Setup::new(None);
    for (name, ip) in cases {
        setup.answers.insert(name.into(), vec![ip.parse().unwrap()]);
    }
    let h = setup.start();
    for (i, (name, _)) in cases.iter().enumerate() {
        let mut s = h.connect().await;
        if i % 2 == 0 {
            s.write_all(&Hello::sni(name).bytes()).await.unwrap();
        } else {
            let head = connect_head(&mut s, &format!("{name}:443")).await;
            assert!(head.starts_with("HTTP/1.1 403 "), "{head}");
        }
        expect_closed(&mut s).await;
    }
    let records = h.sink.wait_for(cases.len()).await;
    for (r, (name, ip)) in records.iter().zip(cases) {
        let reason = r.reason.as_deref().unwrap_or("");
        assert!(reason.starts_with("forbidden_address:"), "{name}: {r:?}");
        assert_eq!(r.decision, Verdict::Deny);
        assert_eq!(r.target.as_deref(), Some(name));
        assert_eq!(r.resolved, None);
        assert_eq!(r.refused.len(), 1);
        assert_eq!(r.refused[0].addr, ip.parse::<IpAddr>().unwrap());
    }
    h.shutdown().await;
}

#[tokio::test]
async fn unresolvable_name_is_refused() {
    let h = Setup::new(None).start();
    let mut s = h.connect().await;
    s.write_all(&Hello::sni("nowhere.wild.test").bytes())
        .await
        .unwrap();
    expect_closed(&mut s).await;
    assert_deny(&h.sink.wait_for(1).await[0], "resolve_failed");
    h.shutdown().await;
}

#[tokio::test]
async fn ip_literals_are_refused() {
    let h = Setup::new(None).start();
    let mut s = h.connect().await;
    let head = connect_head(&mut s, "10.0.0.1:443").await;
    assert!(head.starts_with("HTTP/1.1 403 "), "{head}");
    let mut s = h.connect().await;
    let head = connect_head(&mut s, "[::1]:443").await;
    assert!(head.starts_with("HTTP/1.1 403 "), "{head}");
    let mut s = h.connect().await;
    s.write_all(&Hello::sni("127.0.0.1").bytes()).await.unwrap();
    expect_closed(&mut s).await;
    let records = h.sink.wait_for(3).await;
    for r in &records {
        assert_deny(r, "ip_literal");
    }
    h.shutdown().await;
}

#[tokio::test]
async fn no_sni_ech_and_garbage_are_refused() {
    let up = Upstream::start(1).await;
    let h = Setup::new(Some(&up)).start();
    let no_sni = Hello::default().bytes();
    let ech = Hello {
        sni: vec![API.into()],
        ech: true,
    }
    .bytes();
    let duplicate = Hello {
        sni: vec![API.into(), API.into()],
        ech: false,
    }
    .bytes();
    let mut bad_record = Hello::sni(API).bytes();
    bad_record[5] = 0x02; // a ServerHello, not a ClientHello
    let cases: Vec<(&[u8], &str)> = vec![
        (&no_sni, "no_sni"),
        (&ech, "ech"),
        (&duplicate, "bad_client_hello"),
        (&bad_record, "bad_client_hello"),
        (
            b"GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
            "bad_client_hello",
        ),
        (b"\x00\x01\x02\x03garbage", "bad_client_hello"),
        (b"\x16\x03\x01\xff\xffgarbage", "bad_client_hello"),
        (b"CONNECT api.example.test HTTP/1.1\r\n\r\n", "bad_connect"),
    ];
    for (bytes, _) in &cases {
        let mut s = h.connect().await;
        s.write_all(bytes).await.unwrap();
        // Half-close so a hello the gateway would keep reading ends cleanly.
        s.shutdown().await.unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest).await;
        assert!(!rest.starts_with(b"HTTP/1.1 200"), "{rest:?}");
    }
    let records = h.sink.wait_for(cases.len()).await;
    let mut got: Vec<String> = records.iter().filter_map(|r| r.reason.clone()).collect();
    let mut want: Vec<String> = cases.iter().map(|(_, r)| r.to_string()).collect();
    // Connections are handled concurrently, so compare as multisets.
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(up.accepted.load(Ordering::SeqCst), 0);
    h.shutdown().await;
}

#[tokio::test]
async fn silent_box_times_out() {
    let mut setup = Setup::new(None);
    setup.timeouts.client_hello = Duration::from_millis(200);
    let h = setup.start();
    let mut s = h.connect().await;
    s.write_all(&Hello::sni(API).bytes()[..10]).await.unwrap();
    // No half-close: the gateway must give up on its own.
    expect_closed_without_eof(&mut s).await;
    assert_deny(&h.sink.wait_for(1).await[0], "timeout");
    h.shutdown().await;
}

#[tokio::test]
async fn dial_failure_is_refused() {
    // A port that was just free: nothing listens there.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut setup = Setup::new(None);
    setup.overrides.insert(API.into(), addr);
    let h = setup.start();
    let mut s = h.connect().await;
    s.write_all(&Hello::sni(API).bytes()).await.unwrap();
    expect_closed(&mut s).await;
    let r = &h.sink.wait_for(1).await[0];
    assert_deny(r, "dial_failed");
    assert_eq!(r.resolved, Some(addr));
    h.shutdown().await;
}

#[test]
fn invalid_override_name_is_a_config_error() {
    let overrides = HashMap::from([("not a host".to_string(), "127.0.0.1:1".parse().unwrap())]);
    let err = Gateway::new(
        GatewayConfig {
            resolve_overrides: overrides,
            ..GatewayConfig::default()
        },
        Arc::new(StaticResolver::default()),
        Arc::new(MemorySink::new()),
    )
    .err()
    .unwrap();
    assert!(matches!(err, GatewayError::BadOverride { .. }), "{err}");
}
