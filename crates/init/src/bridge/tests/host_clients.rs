//! Host clients reaching the guest through `--uds-path`.

use std::time::{Duration, Instant};

use berth_protocol::guest::VSOCK_PORT;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

use super::*;

#[tokio::test]
async fn a_connect_reaches_the_guest_and_a_mebibyte_echoes_with_half_close() {
    let Echoing {
        paths,
        bridge,
        guest,
        mut outcomes,
        ..
    } = Echoing::start(None).await;

    let client = within(connect_client(&paths.options.uds_path, VSOCK_PORT))
        .await
        .unwrap();
    let data = pattern(1 << 20);
    let started = Instant::now();
    // The client's shutdown reaches the guest as an end of file, and the guest's shutdown
    // after its echo reaches the client as one: both halves close on their own.
    let back = within(echo_through(client, &data)).await.unwrap();
    let took = started.elapsed();
    assert!(back == data, "the echo differs ({} bytes back)", back.len());
    assert_eq!(within(outcomes.recv()).await.unwrap().unwrap(), 1 << 20);
    eprintln!("1 MiB each way through the bridge in {took:?}");

    guest.qemu_exits();
    within(bridge).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_port_nobody_listens_on_is_closed_without_ok() {
    let echoing = Echoing::start(None).await;
    let paths = &echoing.paths;

    let err = within(connect_client(&paths.options.uds_path, 4242))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
    // The link is no worse for it.
    echoing.ping().await;
}

#[tokio::test]
async fn a_silent_client_times_out_without_holding_up_others() {
    let echoing = Echoing::start(Some(Duration::from_millis(500))).await;
    let paths = &echoing.paths;

    let mut silent = UnixStream::connect(&paths.options.uds_path).await.unwrap();
    // Half a line is as silent as none.
    silent.write_all(b"CONNECT 20").await.unwrap();
    let started = Instant::now();
    for _ in 0..3 {
        echoing.ping().await;
    }
    assert_closed_without_reply(&mut silent).await;
    assert!(started.elapsed() >= Duration::from_millis(400));
}

#[tokio::test]
async fn an_over_long_connect_line_is_refused() {
    let echoing = Echoing::start(None).await;
    let paths = &echoing.paths;

    let mut client = UnixStream::connect(&paths.options.uds_path).await.unwrap();
    let mut line = format!("CONNECT {VSOCK_PORT}").into_bytes();
    line.resize(64 * 1024, b'0');
    line.push(b'\n');
    // The bridge may close before it has all of it.
    let _ = client.write_all(&line).await;
    assert_closed_without_reply(&mut client).await;

    let mut client = UnixStream::connect(&paths.options.uds_path).await.unwrap();
    client.write_all(b"HELLO 2024\n").await.unwrap();
    assert_closed_without_reply(&mut client).await;
}

#[tokio::test]
async fn the_bridge_exits_cleanly_when_qemus_connection_ends_and_drops_its_clients() {
    let Echoing {
        paths,
        bridge,
        guest,
        ..
    } = Echoing::start(None).await;
    let mut client = within(connect_client(&paths.options.uds_path, VSOCK_PORT))
        .await
        .unwrap();
    // One QEMU at a time.
    assert!(UnixStream::connect(&paths.options.serial).await.is_err());

    guest.qemu_exits();
    within(bridge).await.unwrap().unwrap();
    assert_closed_without_reply(&mut client).await;
}

#[tokio::test]
async fn a_client_whose_guest_never_reads_is_held_back_not_buffered() {
    let paths = Paths::new();
    let _bridge = start_bridge(&paths.options, None);
    let guest = Guest::connect(&paths.options.serial).await;
    let listener = guest.link.listen(VSOCK_PORT).unwrap();
    // The guest's end is held, never read.
    let (client, _held) = within(async {
        tokio::join!(
            connect_client(&paths.options.uds_path, VSOCK_PORT),
            listener.accept()
        )
    })
    .await;
    let mut client = client.unwrap();

    // Writes stop being taken once the window, the bridge's buffer and the sockets' own
    // buffers are full; a bridge that queued without bound would take all of it.
    let chunk = pattern(64 * 1024);
    let mut taken = 0usize;
    while taken < 64 << 20 {
        match tokio::time::timeout(Duration::from_secs(2), client.write(&chunk)).await {
            Ok(written) => taken += written.unwrap(),
            Err(_) => break,
        }
    }
    eprintln!("the bridge and its sockets took {taken} bytes before holding the client back");
    assert!(
        taken < 4 << 20,
        "{taken} bytes taken for a guest that reads nothing"
    );
    // The link still serves other streams.
    let (_server, _) = echo(&guest.link, 2026);
    let other = within(connect_client(&paths.options.uds_path, 2026))
        .await
        .unwrap();
    assert_eq!(within(echo_through(other, b"ping")).await.unwrap(), b"ping");
}
