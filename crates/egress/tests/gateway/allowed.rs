use crate::fixture::{assert_allow, connect_head, exchange, Hello, Setup, Upstream, API};
use berth_egress::gateway::{Verdict, Via};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn direct_allowed_host_flows_both_ways() {
    let hello = Hello::sni(API).bytes();
    let mut up = Upstream::start(hello.len()).await;
    let h = Setup::new(Some(&up)).start();
    let mut s = h.connect().await;
    assert_eq!(exchange(&mut s, &hello).await, b"pong");
    let mut expected = hello.clone();
    expected.extend(b"ping");
    assert_eq!(up.received.recv().await.unwrap(), expected);
    let records = h.sink.wait_for(1).await;
    assert_eq!(records[0].box_id, h.box_id);
    assert_allow(&records[0], Via::Direct, &up, expected.len() as u64);
    h.shutdown().await;
}

#[tokio::test]
async fn connect_allowed_host_flows_both_ways() {
    let hello = Hello::sni(API).bytes();
    let mut up = Upstream::start(hello.len()).await;
    let h = Setup::new(Some(&up)).start();
    let mut s = h.connect().await;
    let head = connect_head(&mut s, "api.example.test:443").await;
    assert_eq!(head, "HTTP/1.1 200 Connection Established\r\n\r\n");
    assert_eq!(exchange(&mut s, &hello).await, b"pong");
    let mut expected = hello.clone();
    expected.extend(b"ping");
    assert_eq!(up.received.recv().await.unwrap(), expected);
    let records = h.sink.wait_for(1).await;
    assert_allow(&records[0], Via::Connect, &up, expected.len() as u64);
    h.shutdown().await;
}

#[tokio::test]
async fn hello_in_one_byte_writes_works() {
    let hello = Hello::sni(API).bytes();
    let mut up = Upstream::start(hello.len()).await;
    let h = Setup::new(Some(&up)).start();
    for via_connect in [false, true] {
        let mut s = h.connect().await;
        if via_connect {
            let head = connect_head(&mut s, "api.example.test:443").await;
            assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        }
        for b in &hello {
            s.write_all(std::slice::from_ref(b)).await.unwrap();
            s.flush().await.unwrap();
        }
        s.write_all(b"ping").await.unwrap();
        s.shutdown().await.unwrap();
        let mut back = Vec::new();
        s.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"pong");
        let got = up.received.recv().await.unwrap();
        assert_eq!(&got[..hello.len()], &hello[..]);
    }
    let records = h.sink.wait_for(2).await;
    assert!(
        records.iter().all(|r| r.decision == Verdict::Allow),
        "{records:?}"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn trailing_dot_and_upper_case_are_the_canonical_name() {
    let spellings = ["API.Example.TEST.", "api.example.test.", "Api.Example.Test"];
    let hellos: Vec<Vec<u8>> = spellings.iter().map(|n| Hello::sni(n).bytes()).collect();
    // The upstream answers after `hello_len` bytes, and spellings differ in length, so each
    // spelling gets its own upstream and gateway.
    for (spelling, hello) in spellings.iter().zip(&hellos) {
        let mut up = Upstream::start(hello.len()).await;
        let h = Setup::new(Some(&up)).start();
        // Direct: the SNI spelling is canonicalised before the policy and the override.
        let mut s = h.connect().await;
        assert_eq!(exchange(&mut s, hello).await, b"pong", "{spelling}");
        assert_eq!(
            &up.received.recv().await.unwrap()[..hello.len()],
            &hello[..]
        );
        // CONNECT with this spelling, ClientHello with another one: still the same name.
        let mut s = h.connect().await;
        let head = connect_head(&mut s, &format!("{spelling}:443")).await;
        assert!(head.starts_with("HTTP/1.1 200 "), "{spelling}: {head}");
        assert_eq!(exchange(&mut s, &hellos[0]).await, b"pong", "{spelling}");
        let records = h.sink.wait_for(2).await;
        for r in &records {
            assert_eq!(r.decision, Verdict::Allow, "{r:?}");
            assert_eq!(r.target.as_deref(), Some(API));
        }
        h.shutdown().await;
    }
}
