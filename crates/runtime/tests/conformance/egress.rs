//! The egress channel: the only way out of a box.

use std::time::Duration;

use berth_handoff::{receive_first, First, Sender};
use berth_protocol::guest::{BoxUser, BOX_CA_BUNDLE, EGRESS_PROXY_PORT, EGRESS_TLS_PORT};
use berth_runtime::{EgressListener, EgressSetup, GuestClient, Limits};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::common::{run, run_ok, Fixture};
use crate::GRACE;

/// A shell line that connects to 127.0.0.1:`port` in the box, sends `send` and prints
/// the first line back: bash's /dev/tcp where bash exists (the sandbox's host rootfs),
/// busybox `nc` where it does not (the VM's minimal rootfs).
fn connect_script(port: u16, send: &str) -> String {
    format!(
        "if command -v bash >/dev/null; then \
           exec bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && printf \"{send}\" >&3 && head -n1 <&3'; \
         else printf '{send}' | nc 127.0.0.1 {port}; fi"
    )
}

async fn run_in_box(client: &GuestClient, script: String) -> (i32, String, String) {
    run(
        client,
        &["sh", "-c", &script],
        BoxUser::User,
        Some(Duration::from_secs(30)),
    )
    .await
}

/// 443 and 3128 on the box's loopback reach the listener `start` returns (one stream per
/// connection, bytes unchanged both ways); nothing else listens; `/etc/hosts` pins the
/// allowed names and the trust bundle carries the box's CA, both read-only; the box's env
/// reaches its processes (and for the sandbox its file is gone once read).
pub async fn egress_leaves_only_through_the_channel(fx: &Fixture) {
    let mut spec = fx.spec(Limits::default());
    let ca = "-----BEGIN CERTIFICATE-----\nQkVSVEgtVEVTVC1DQQ==\n-----END CERTIFICATE-----\n";
    spec.egress = EgressSetup {
        pinned_hosts: vec!["api.example.test".into()],
        ca_pem: Some(ca.into()),
    };
    spec.env = [(
        "ANTHROPIC_API_KEY".to_owned(),
        "berth-ph-conformance".to_owned(),
    )]
    .into();
    let booted = fx.runtime.start(&spec).await.expect("start");
    let (client, egress) = (booted.client, booted.egress);

    let hosts = run_ok(&client, &["cat", "/etc/hosts"], BoxUser::User).await;
    let pinned = hosts
        .lines()
        .find(|l| {
            l.split_whitespace()
                .skip(1)
                .any(|n| n == "api.example.test")
        })
        .unwrap_or_else(|| panic!("api.example.test is not pinned: {hosts}"));
    assert_eq!(
        pinned.split_whitespace().next(),
        Some("127.0.0.1"),
        "{hosts}"
    );
    let bundle = run_ok(&client, &["cat", BOX_CA_BUNDLE], BoxUser::User).await;
    assert!(
        bundle.ends_with(ca),
        "the box CA is not in the trust bundle"
    );
    for user in [BoxUser::User, BoxUser::Root] {
        for file in ["/etc/hosts", BOX_CA_BUNDLE] {
            let (code, _, _) = run(
                &client,
                &["sh", "-c", &format!("echo 10.0.0.1 evil >> {file}")],
                user,
                None,
            )
            .await;
            assert_ne!(code, 0, "{user:?} could write {file}");
        }
    }

    let env = run_ok(&client, &["env"], BoxUser::User).await;
    assert!(
        env.contains("ANTHROPIC_API_KEY=berth-ph-conformance\n"),
        "{env}"
    );
    assert!(env.contains("HTTPS_PROXY=http://127.0.0.1:3128\n"), "{env}");
    if let Some(sandbox) = fx.sandbox() {
        let paths = sandbox.layout().box_paths(&spec.id);
        assert!(!paths.env_file().exists(), "env.json outlived the boot");
    }

    // Each port: the box writes a line, the host side answers, the box reads the answer.
    let mut listener = egress;
    for (round, port) in [
        ("first", EGRESS_TLS_PORT),
        ("first", EGRESS_PROXY_PORT),
        ("after rebind", EGRESS_TLS_PORT),
    ] {
        if round == "after rebind" {
            // A new listener for a running box (the daemon restarted) gets the box's next
            // stream.
            drop(listener);
            listener = fx
                .runtime
                .rebind_egress(&spec.id, spec.id_map)
                .await
                .expect("rebind");
        }
        egress_round_trip(&client, &listener, port, round).await;
    }

    for port in [80, 22, 8080] {
        let (code, _, _) = run_in_box(&client, connect_script(port, "x\\n")).await;
        assert_ne!(code, 0, "something listens on port {port}");
    }
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
}

/// The box connects to `port` on its loopback and writes a line; the host side accepts it
/// on `listener`, answers, and the box reads the answer.
pub async fn egress_round_trip(
    client: &GuestClient,
    listener: &EgressListener,
    port: u16,
    round: &str,
) {
    let box_side = {
        let client = client.clone();
        let script = connect_script(port, &format!("ping {port}\\n"));
        tokio::spawn(async move { run_in_box(&client, script).await })
    };
    let (stream, _) = tokio::time::timeout(Duration::from_secs(30), listener.accept())
        .await
        .unwrap_or_else(|_| panic!("{round}: no stream from port {port}"))
        .expect("accept");
    // The gateway's first read: in a sandbox berth-init (PID 1) hands the connection's own
    // socket over with the stream; a VM's stream carries the bytes.
    let first = receive_first(&stream, Sender::BoxInit)
        .await
        .unwrap_or_else(|e| panic!("{round}: {e}"));
    match first {
        First::Socket(socket) => answer(socket, Vec::new(), port, round).await,
        First::Byte(byte) => answer(stream, vec![byte], port, round).await,
        First::Closed => panic!("{round}: the stream ended early"),
    }
    let (code, out, err) = tokio::time::timeout(Duration::from_secs(60), box_side)
        .await
        .expect("the box side ended")
        .unwrap();
    assert_eq!(
        (code, out.trim()),
        (0, format!("pong {port}").as_str()),
        "{round}: {err}"
    );
}

/// Reads the box's line (`line` holds what was read of it already) and answers it.
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    mut line: Vec<u8>,
    port: u16,
    round: &str,
) {
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\n") {
        let n = stream.read(&mut byte).await.unwrap();
        assert_eq!(n, 1, "{round}: the stream ended early: {line:?}");
        line.push(byte[0]);
    }
    assert_eq!(line, format!("ping {port}\n").as_bytes(), "{round}");
    stream
        .write_all(format!("pong {port}\n").as_bytes())
        .await
        .unwrap();
}
