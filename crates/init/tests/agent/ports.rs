//! A port's socket handed to the host (`POST /v1/ports/{port}/handoff`) by the real agent:
//! the connected socket itself, and berth-init keeps no copy; the answers that are not a
//! socket (nothing listens, a reserved port) come before anything is handed; and the host
//! sees the agent, the channel's listening process, as the sender.

use std::io::{Read, Write};
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use berth_protocol::ErrorCode;
use berth_runtime::{HandoffRefused, HandoffSender, PortHandoff};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::common::Agent;

/// Sends a handoff request for `port` and reads one byte and the descriptor with it, as
/// the host does but without vetting the sender (the agent here is a plain child process,
/// not a box's PID 1).
fn hand_over_raw(
    agent: &Agent,
    port: u16,
) -> (u8, Option<OwnedFd>, std::os::unix::net::UnixStream) {
    let mut unix = std::os::unix::net::UnixStream::connect(agent.socket()).unwrap();
    let head = format!(
        "POST /v1/ports/{port}/handoff HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-length: 0\r\n\r\n",
        agent.token.as_str()
    );
    unix.write_all(head.as_bytes()).unwrap();
    let mut byte = [0u8];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one descriptor's control message, aligned for `cmsghdr`.
    let mut control = [MaybeUninit::<u64>::zeroed(); 8];
    // SAFETY: zeroed msghdr is valid; its pointers name live buffers of the sizes given.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 8]>() as _;
    // SAFETY: as above; a blocking read of one byte.
    let read = unsafe { libc::recvmsg(unix.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    assert_eq!(read, 1, "no answer: {}", std::io::Error::last_os_error());
    // SAFETY: the kernel filled `msg_controllen` bytes; at most one SCM_RIGHTS descriptor
    // fits, and it is now ours.
    let fd = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (!cmsg.is_null() && (*cmsg).cmsg_type == libc::SCM_RIGHTS)
            .then(|| OwnedFd::from_raw_fd(libc::CMSG_DATA(cmsg).cast::<RawFd>().read_unaligned()))
    };
    (byte[0], fd, unix)
}

#[tokio::test]
async fn the_connected_socket_is_handed_over_and_the_agent_keeps_no_copy() {
    let agent = Agent::start();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (byte, fd, mut unix) = hand_over_raw(&agent, port);
    assert_eq!(byte, berth_handoff::MARKER);
    let socket = std::net::TcpStream::from(fd.expect("no descriptor came with the byte"));
    assert_eq!(socket.peer_addr().unwrap().port(), port);
    // The agent's answer after the socket, which the host never reads.
    let mut buf = [0u8; 256];
    let n = unix.read(&mut buf).unwrap();
    let rest = String::from_utf8_lossy(&buf[..n]);
    assert!(rest.starts_with("HTTP/1.1 204"), "{rest:?}");

    let (mut accepted, _) = listener.accept().await.unwrap();
    socket.set_nonblocking(true).unwrap();
    let mut socket = tokio::net::TcpStream::from_std(socket).unwrap();
    socket.write_all(b"ping").await.unwrap();
    let mut got = [0u8; 4];
    accepted.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"ping");
    accepted.write_all(b"pong").await.unwrap();
    socket.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"pong");
    // Closing the host's descriptor ends the connection: berth-init held no other.
    drop(socket);
    assert_eq!(accepted.read(&mut got).await.unwrap(), 0);
}

#[tokio::test]
async fn nothing_listening_and_reserved_ports_are_answers_not_sockets() {
    let agent = Agent::start();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let err = agent
        .client
        .port_handoff(closed, HandoffSender::ThisProcess)
        .await
        .unwrap_err();
    assert_eq!(
        super::common::remote_code(err),
        (503, ErrorCode::Unavailable)
    );
    for reserved in [443, 3128, 0] {
        let refused = agent
            .client
            .port_handoff(reserved, HandoffSender::ThisProcess)
            .await
            .unwrap();
        assert!(
            matches!(
                &refused,
                PortHandoff::Refused(HandoffRefused::Answered { status: 400, body })
                    if body.error.code == ErrorCode::InvalidRequest
            ),
            "{reserved}: {refused:?}"
        );
    }
    // Without the token: refused before anything is dialled.
    let answer = agent.raw(&format!(
        "POST /v1/ports/{closed}/handoff HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    ));
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
}

#[tokio::test]
async fn the_host_sees_the_agent_as_the_sender_and_takes_it_only_from_a_box_init() {
    let agent = Agent::start();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let refused = agent
        .client
        .port_handoff(port, HandoffSender::BoxInit)
        .await
        .unwrap();
    let agent_pid = agent.child.id() as i32;
    assert!(
        matches!(
            &refused,
            PortHandoff::Refused(HandoffRefused::Vetting(berth_handoff::HandoffError::NotFromBoxInit { pid }))
                if *pid == agent_pid
        ),
        "{refused:?}"
    );
    // The refused socket was closed: the app sees its connection end.
    let (mut accepted, _) = listener.accept().await.unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(accepted.read(&mut buf).await.unwrap(), 0);
}
