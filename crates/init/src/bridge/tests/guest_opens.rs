//! Streams the guest opens, delivered to `<uds-path>_<port>`.

use berth_protocol::guest::EGRESS_VSOCK_PORT;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

use super::*;

#[tokio::test]
async fn a_guest_stream_to_2025_reaches_the_host_listener_with_half_close() {
    let paths = Paths::new();
    let _bridge = start_bridge(&paths.options, None);
    let egress = UnixListener::bind(paths.host_port(EGRESS_VSOCK_PORT)).unwrap();
    let guest = Guest::connect(&paths.options.serial).await;

    let mut stream = within(guest.link.open(EGRESS_VSOCK_PORT)).await.unwrap();
    let (mut host, _) = within(egress.accept()).await.unwrap();
    let data = pattern(300 * 1024);
    stream.write_all(&data).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut got = Vec::new();
    within(host.read_to_end(&mut got)).await.unwrap();
    assert!(got == data, "the host got {} bytes", got.len());
    // The guest's write half is shut; its read half still works.
    host.write_all(b"answer").await.unwrap();
    host.shutdown().await.unwrap();
    let mut answer = Vec::new();
    within(stream.read_to_end(&mut answer)).await.unwrap();
    assert_eq!(answer, b"answer");
}

#[tokio::test]
async fn a_guest_stream_without_a_host_socket_is_refused() {
    let paths = Paths::new();
    let _bridge = start_bridge(&paths.options, None);
    let guest = Guest::connect(&paths.options.serial).await;

    let refused = match within(guest.link.open(EGRESS_VSOCK_PORT)).await {
        Err(err) => err,
        // Accepted before the bridge tried the host socket: the refusal is a reset.
        Ok(mut stream) => {
            let mut buf = [0u8; 16];
            within(stream.read(&mut buf)).await.unwrap_err()
        }
    };
    assert!(
        matches!(
            refused.kind(),
            io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionReset
        ),
        "{refused}"
    );
    // A host listener that appears later is found by the next stream.
    let egress = UnixListener::bind(paths.host_port(EGRESS_VSOCK_PORT)).unwrap();
    let mut stream = within(guest.link.open(EGRESS_VSOCK_PORT)).await.unwrap();
    stream.write_all(b"late").await.unwrap();
    let (mut host, _) = within(egress.accept()).await.unwrap();
    let mut buf = [0u8; 4];
    within(host.read_exact(&mut buf)).await.unwrap();
    assert_eq!(&buf, b"late");
}

#[tokio::test]
async fn a_guest_stream_to_a_port_the_host_does_not_serve_is_refused() {
    let paths = Paths::new();
    let _bridge = start_bridge(&paths.options, None);
    // Even with a socket there: the bridge forwards only the ports it serves.
    let _other = UnixListener::bind(paths.host_port(7)).unwrap();
    let guest = Guest::connect(&paths.options.serial).await;
    let err = within(guest.link.open(7)).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
}
