//! The ports proxy on a real sandbox box reaches the app on a socket berth-init handed to
//! the daemon (`berth-handoff`), not through berth-init's relay: after a request, the
//! daemon (this process) holds a TCP socket connected to the app's port in the box, which
//! no relayed connection would give it (that is a Unix socket to the box's agent).

use http::{Method, StatusCode};
use serde_json::json;

use crate::ports::{get, json_of, serving, APP};

/// The port of this test's own instance of the app. Tests of one binary share this process
/// (`cargo test` runs them as threads), and others hold sockets to the app's usual port in
/// their boxes: only this test's box listens on this one.
const HANDED_PORT: u16 = 8019;

/// This process's TCP sockets whose peer is `127.0.0.1:<port>` (nothing on the host's own
/// loopback listens on the app's port in these tests).
fn sockets_to(port: u16) -> usize {
    let mut count = 0;
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if !is_socket {
            continue;
        }
        // SAFETY: a zeroed sockaddr_storage is valid; getpeername writes at most `len`
        // bytes of it, and only reads the descriptor (one closed since is an error).
        let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let rc = unsafe { libc::getpeername(fd, (&raw mut addr).cast(), &mut len) };
        if rc != 0 || i32::from(addr.ss_family) != libc::AF_INET {
            continue;
        }
        // SAFETY: the family says the storage holds a sockaddr_in.
        let inet = unsafe { *(&raw const addr).cast::<libc::sockaddr_in>() };
        if u16::from_be(inet.sin_port) == port
            && u32::from_be(inet.sin_addr.s_addr) == u32::from(std::net::Ipv4Addr::LOCALHOST)
        {
            count += 1;
        }
    }
    count
}

#[tokio::test]
async fn a_sandbox_boxs_app_is_reached_on_the_socket_berth_init_hands_over() {
    let Some(server) = serving(30).await else {
        return;
    };
    let started = json!({
        "cmd": ["python3", "-c", APP, HANDED_PORT.to_string()],
        "background": true,
    });
    let (status, body) = server
        .call(Method::POST, "/v1/boxes/web/exec", Some(started))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let bearer = format!("Bearer {}", server.key);
    let path = format!("/v1/boxes/web/ports/{HANDED_PORT}/headers");
    assert_eq!(sockets_to(HANDED_PORT), 0, "before any request");
    let (status, _, body) = get(server.addr, "berth", &path, &[("authorization", &bearer)]).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    let first = json_of(&body)["peer"].clone();
    // The connection went back to the pool, held by the daemon: the box's own socket.
    assert_eq!(
        sockets_to(HANDED_PORT),
        1,
        "no handed socket to the app's port"
    );
    // And the next request reuses it.
    let (status, _, body) = get(server.addr, "berth", &path, &[("authorization", &bearer)]).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert_eq!(json_of(&body)["peer"], first);
    assert_eq!(sockets_to(HANDED_PORT), 1);
}
