use std::os::fd::OwnedFd;
use std::process::Command;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

use super::*;

/// A connected TCP pair on loopback: (the end that is handed over, the end kept).
async fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let far = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (near, _) = listener.accept().await.unwrap();
    (near, far)
}

fn owned(stream: TcpStream) -> OwnedFd {
    stream.into_std().unwrap().into()
}

#[tokio::test]
async fn a_handed_socket_arrives_and_carries_data_both_ways() {
    let (box_side, host_side) = UnixStream::pair().unwrap();
    let (handed, mut client) = tcp_pair().await;
    send(&box_side, owned(handed)).await.unwrap();
    let First::Socket(mut socket) = receive_first(&host_side, Sender::ThisProcess)
        .await
        .unwrap()
    else {
        panic!("no socket came");
    };
    client.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    socket.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping");
    socket.write_all(b"pong").await.unwrap();
    client.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"pong");
    // The sender kept no copy: closing the host's end is the end of the connection.
    drop(socket);
    assert_eq!(client.read(&mut buf).await.unwrap(), 0);
}

#[tokio::test]
async fn a_plain_stream_gives_its_first_byte_and_a_closed_one_says_so() {
    let (mut box_side, host_side) = UnixStream::pair().unwrap();
    box_side.write_all(b"\x16\x03\x01").await.unwrap();
    let first = receive_first(&host_side, Sender::BoxInit).await.unwrap();
    assert!(matches!(first, First::Byte(0x16)), "{first:?}");
    let (box_side, host_side) = UnixStream::pair().unwrap();
    drop(box_side);
    let first = receive_first(&host_side, Sender::BoxInit).await.unwrap();
    assert!(matches!(first, First::Closed), "{first:?}");
}

#[tokio::test]
async fn a_socket_from_a_process_that_is_not_a_box_init_is_refused_and_closed() {
    let (box_side, host_side) = UnixStream::pair().unwrap();
    let (handed, mut client) = tcp_pair().await;
    send(&box_side, owned(handed)).await.unwrap();
    let err = receive_first(&host_side, Sender::BoxInit)
        .await
        .unwrap_err();
    assert!(
        matches!(err, HandoffError::NotFromBoxInit { pid } if pid as u32 == std::process::id()),
        "{err}"
    );
    let mut buf = [0u8; 1];
    assert_eq!(
        client.read(&mut buf).await.unwrap(),
        0,
        "the refused socket stayed open"
    );
}

#[tokio::test]
async fn what_is_not_a_connected_tcp_stream_is_refused() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (pipe_read, _pipe_write) = std::io::pipe().unwrap();
    let (unix_a, _unix_b) = std::os::unix::net::UnixStream::pair().unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let fds: [OwnedFd; 4] = [listener.into(), pipe_read.into(), unix_a.into(), udp.into()];
    for fd in fds {
        let (box_side, host_side) = UnixStream::pair().unwrap();
        send(&box_side, fd).await.unwrap();
        let err = receive_first(&host_side, Sender::ThisProcess)
            .await
            .unwrap_err();
        assert!(matches!(err, HandoffError::NotTcp), "{err}");
    }
}

#[tokio::test]
async fn more_than_one_descriptor_or_a_wrong_byte_is_refused_and_all_are_closed() {
    let mut clients = Vec::new();
    for count in [2, MAX_FDS, MAX_FDS + 3] {
        let (box_side, host_side) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut handed = Vec::new();
        for _ in 0..count {
            let (near, far) = tcp_pair().await;
            handed.push(owned(near));
            clients.push(far);
        }
        send_many(&box_side, MARKER, &handed);
        drop(handed);
        host_side.set_nonblocking(true).unwrap();
        let host_side = UnixStream::from_std(host_side).unwrap();
        let err = receive_first(&host_side, Sender::ThisProcess)
            .await
            .unwrap_err();
        assert!(
            matches!(err, HandoffError::Malformed { .. }),
            "{count}: {err}"
        );
    }
    let (box_side, host_side) = std::os::unix::net::UnixStream::pair().unwrap();
    let (near, far) = tcp_pair().await;
    clients.push(far);
    send_many(&box_side, b'C', &[owned(near)]);
    host_side.set_nonblocking(true).unwrap();
    let host_side = UnixStream::from_std(host_side).unwrap();
    let err = receive_first(&host_side, Sender::ThisProcess)
        .await
        .unwrap_err();
    assert!(
        matches!(err, HandoffError::Malformed { byte: b'C', fds: 1 }),
        "{err}"
    );
    for mut client in clients {
        let mut buf = [0u8; 1];
        assert_eq!(
            client.read(&mut buf).await.unwrap(),
            0,
            "a refused socket stayed open"
        );
    }
}

/// Sends `byte` with every descriptor of `fds` in one message (what a hostile sender may do).
fn send_many(unix: &std::os::unix::net::UnixStream, byte: u8, fds: &[OwnedFd]) {
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let mut data = [byte];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let space = unsafe { libc::CMSG_SPACE((raw.len() * size_of::<RawFd>()) as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN((raw.len() * size_of::<RawFd>()) as u32) as _;
        std::ptr::copy_nonoverlapping(
            raw.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<RawFd>(),
            raw.len(),
        );
        assert_eq!(libc::sendmsg(unix.as_raw_fd(), &msg, 0), 1);
    }
}

/// Runs `python3` as PID 1 of a new PID namespace (`nesting` levels deep), handing a
/// connected TCP socket over `path`; returns what the host made of it.
async fn handoff_from_namespace(nesting: usize) -> Option<Result<First, HandoffError>> {
    let root = unsafe { libc::geteuid() } == 0;
    let tools = ["unshare", "python3"].iter().all(|t| {
        Command::new("which")
            .arg(t)
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !root || !tools {
        berth_testkit::skip(
            "sandbox",
            "needs root, unshare and python3 to run a process as a namespace's PID 1",
        );
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("handoff.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let script = format!(
        "import os, socket\n\
         assert os.getpid() == 1, os.getpid()\n\
         t = socket.create_connection(('127.0.0.1', {port}))\n\
         u = socket.socket(socket.AF_UNIX); u.connect({path:?})\n\
         socket.send_fds(u, [b'\\x00'], [t.fileno()])\n\
         t.close(); u.recv(1)\n",
        path = path.to_str().unwrap()
    );
    let mut cmd = tokio::process::Command::new("unshare");
    for level in 0..nesting {
        if level > 0 {
            cmd.arg("unshare");
        }
        cmd.args(["--pid", "--fork"]);
    }
    let mut child = cmd
        .arg("python3")
        .arg("-c")
        .arg(script)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (host_side, _) = listener.accept().await.unwrap();
    let _accepted = tcp.accept().await.unwrap();
    let result = receive_first(&host_side, Sender::BoxInit).await;
    drop(host_side);
    let status = child.wait().await.unwrap();
    assert!(status.success(), "the sender failed: {status}");
    Some(result)
}

#[tokio::test]
async fn a_box_init_is_trusted_but_an_init_of_a_namespace_the_box_made_is_not() {
    let Some(one_level) = handoff_from_namespace(1).await else {
        return;
    };
    assert!(matches!(one_level, Ok(First::Socket(_))), "{one_level:?}");
    let two_levels = handoff_from_namespace(2).await.unwrap();
    assert!(
        matches!(two_levels, Err(HandoffError::NotFromBoxInit { .. })),
        "{two_levels:?}"
    );
}
