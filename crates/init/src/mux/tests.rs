//! Two links joined by an in-memory pipe, one per role; and links facing raw bytes, for
//! what a broken peer or a restore puts on the wire.

use berth_testkit::pattern;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::frame::{self, Frame, Out, HEADER_LEN};
use super::state::CONTROL_FRAMES;
use super::*;

/// Only a bound on failure: every wait below is for a condition.
const LIMIT: Duration = Duration::from_secs(30);
const PIPE: usize = 64 * 1024;

async fn bound<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no progress within {LIMIT:?}"))
}

/// Yields until `cond` holds (other tasks run meanwhile).
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    bound(what, async {
        while !cond() {
            tokio::task::yield_now().await;
        }
    })
    .await
}

type Task = JoinHandle<Result<(), MuxError>>;

fn pair() -> (Link, Task, Link, Task) {
    let (h, g) = duplex(PIPE);
    let (host, host_task) = Link::start(h, Role::Host);
    let (guest, guest_task) = Link::start(g, Role::Guest);
    (host, host_task, guest, guest_task)
}

/// Accepts on `listener` forever, echoing each stream until its EOF.
fn echo_server(listener: MuxListener) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok(mut s) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = s.shutdown().await;
            });
        }
    })
}

/// Sends `msg` through an echo and reads it back, both at once (the windows hold less).
async fn round_trip(s: &mut MuxStream, msg: &[u8]) {
    let (mut r, mut w) = tokio::io::split(s);
    let mut got = vec![0u8; msg.len()];
    let (sent, read) = bound("echo", async {
        tokio::join!(w.write_all(msg), r.read_exact(&mut got))
    })
    .await;
    sent.unwrap();
    read.unwrap();
    assert_eq!(got, msg);
}

#[tokio::test(flavor = "current_thread")]
async fn streams_open_and_echo_both_ways() {
    let (host, _ht, guest, _gt) = pair();
    let _g = echo_server(guest.listen(2024).unwrap());
    let _h = echo_server(host.listen(2025).unwrap());
    assert_eq!(
        guest.listen(2024).unwrap_err().kind(),
        io::ErrorKind::AddrInUse
    );
    let mut to_guest = bound("open", host.open(2024)).await.unwrap();
    let mut to_host = bound("open", guest.open(2025)).await.unwrap();
    assert_eq!(to_guest.id() % 2, 0, "the host opens even ids");
    assert_eq!(to_host.id() % 2, 1, "the guest opens odd ids");
    round_trip(&mut to_guest, b"hello guest").await;
    round_trip(&mut to_host, b"hello host").await;
    // Bigger than a frame and a window: credit must flow back.
    round_trip(&mut to_guest, &pattern::bytes(700_000, 1)).await;
}

#[tokio::test(flavor = "current_thread")]
async fn fifty_streams_each_move_a_mebibyte_intact() {
    const STREAMS: u64 = 50;
    const SIZE: usize = 1 << 20;
    let (host, _ht, guest, _gt) = pair();
    let listener = guest.listen(7).unwrap();
    // The guest hashes what each stream brings and answers with the hash.
    let server = tokio::spawn(async move {
        for _ in 0..STREAMS {
            let mut s = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut all = Vec::with_capacity(SIZE);
                s.read_to_end(&mut all).await.unwrap();
                s.write_all(&pattern::fnv1a(&all).to_be_bytes())
                    .await
                    .unwrap();
                s.write_all(&(all.len() as u64).to_be_bytes())
                    .await
                    .unwrap();
                s.shutdown().await.unwrap();
            });
        }
    });
    let clients: Vec<_> = (0..STREAMS)
        .map(|i| {
            let host = host.clone();
            tokio::spawn(async move {
                let data = pattern::bytes(SIZE, i);
                let mut s = host.open(7).await.unwrap();
                s.write_all(&data).await.unwrap();
                s.shutdown().await.unwrap();
                let mut answer = Vec::new();
                s.read_to_end(&mut answer).await.unwrap();
                assert_eq!(
                    answer[..8],
                    pattern::fnv1a(&data).to_be_bytes(),
                    "stream {i}"
                );
                assert_eq!(answer[8..], (SIZE as u64).to_be_bytes(), "stream {i}");
            })
        })
        .collect();
    bound("50 streams", async {
        for c in clients {
            c.await.unwrap();
        }
        server.await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_stream_nobody_reads_holds_one_window_and_blocks_no_other() {
    let (host, _ht, guest, _gt) = pair();
    let listener = guest.listen(7).unwrap();
    let mut stuck = host.open(7).await.unwrap();
    let _unread = listener.accept().await.unwrap();
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = sent.clone();
    let _writer = tokio::spawn(async move {
        let chunk = vec![1u8; 10_000];
        while let Ok(n) = stuck.write(&chunk).await {
            counter.fetch_add(n, Ordering::SeqCst);
        }
    });
    until("the stuck stream fills its window", || {
        sent.load(Ordering::SeqCst) >= WINDOW as usize
    })
    .await;
    let _echo = echo_server(listener);
    let mut other = host.open(7).await.unwrap();
    round_trip(&mut other, &pattern::bytes(3 << 20, 2)).await;
    assert_eq!(
        sent.load(Ordering::SeqCst),
        WINDOW as usize,
        "a sender with no credit must not buffer more"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_half_closed_stream_still_carries_the_other_way() {
    let (host, _ht, guest, _gt) = pair();
    let listener = guest.listen(7).unwrap();
    let mut client = host.open(7).await.unwrap();
    let mut server = listener.accept().await.unwrap();
    client.write_all(b"request").await.unwrap();
    client.shutdown().await.unwrap();
    assert_eq!(
        client.write(b"x").await.unwrap_err().kind(),
        io::ErrorKind::BrokenPipe
    );
    let mut req = Vec::new();
    bound("EOF", server.read_to_end(&mut req)).await.unwrap();
    assert_eq!(req, b"request");
    server.write_all(b"response").await.unwrap();
    server.shutdown().await.unwrap();
    let mut resp = Vec::new();
    bound("EOF", client.read_to_end(&mut resp)).await.unwrap();
    assert_eq!(resp, b"response");
}

#[tokio::test(flavor = "current_thread")]
async fn an_open_to_a_port_nobody_listens_on_is_refused() {
    let (host, _ht, guest, _gt) = pair();
    let err = bound("open", host.open(9)).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
    let err = bound("open", guest.open(9)).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
    // A dropped listener refuses too.
    drop(guest.listen(10).unwrap());
    let err = bound("open", host.open(10)).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
    until("refused ids are freed", || {
        host.ids_in_use() == 0 && guest.ids_in_use() == 0
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn dropping_a_stream_resets_it_at_the_peer_after_what_it_sent() {
    let (host, _ht, guest, _gt) = pair();
    let listener = guest.listen(7).unwrap();
    let mut client = host.open(7).await.unwrap();
    let mut server = listener.accept().await.unwrap();
    server.write_all(b"last words").await.unwrap();
    drop(server);
    let mut buf = [0u8; 10];
    bound("read", client.read_exact(&mut buf)).await.unwrap();
    assert_eq!(&buf, b"last words");
    let err = bound("read", client.read(&mut buf)).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
    let err = client.write(b"x").await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
}

#[tokio::test(flavor = "current_thread")]
async fn a_closed_streams_id_is_reused_by_a_working_stream() {
    let (host, _ht, guest, _gt) = pair();
    let _echo = echo_server(guest.listen(7).unwrap());
    let mut first = host.open(7).await.unwrap();
    round_trip(&mut first, b"one").await;
    let id = first.id();
    drop(first);
    until("both sides free the id", || {
        host.ids_in_use() == 0 && guest.ids_in_use() == 0
    })
    .await;
    let mut second = host.open(7).await.unwrap();
    assert_eq!(second.id(), id);
    round_trip(&mut second, b"two").await;
}

#[tokio::test(flavor = "current_thread")]
async fn the_257th_concurrent_open_is_refused_until_one_closes() {
    let (host, _ht, guest, _gt) = pair();
    let _listener = guest.listen(7).unwrap();
    let mut open = Vec::new();
    for _ in 0..MAX_STREAMS {
        open.push(bound("open", host.open(7)).await.unwrap());
    }
    let err = bound("open", host.open(7)).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
    open.pop();
    until("the closed stream is freed", || {
        guest.ids_in_use() == MAX_STREAMS - 1
    })
    .await;
    open.push(bound("open", host.open(7)).await.unwrap());
}

/// The raw end of a pipe, speaking frames by hand.
struct Raw {
    io: DuplexStream,
    buf: BytesMut,
}

impl Raw {
    async fn send(&mut self, out: &[Out]) {
        let mut wire = BytesMut::new();
        out.iter().for_each(|o| o.encode(&mut wire));
        self.io.write_all(&wire).await.unwrap();
    }

    /// The next frame after the peer's SYNC (scanning to its HELLO first if `scan`).
    async fn next(&mut self, scan: bool) -> Frame {
        bound("a frame from the link", async {
            loop {
                if !scan || frame::scan_to_hello(&mut self.buf) {
                    if let Some(f) = frame::decode(&mut self.buf).unwrap() {
                        return f;
                    }
                }
                assert_ne!(self.io.read_buf(&mut self.buf).await.unwrap(), 0, "EOF");
            }
        })
        .await
    }
}

fn header(kind: u8, id: u32, len: u32) -> Vec<u8> {
    let mut h = vec![kind];
    h.extend_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&len.to_be_bytes());
    h
}

fn data(id: u32, len: usize) -> Out {
    Out::Frame(Frame::Data {
        id,
        data: Bytes::from(vec![0xAB; len]),
    })
}

/// A host link facing raw bytes, after its HELLO exchange.
async fn host_facing_raw() -> (Link, Task, Raw) {
    let (h, g) = duplex(PIPE);
    let (host, task) = Link::start(h, Role::Host);
    let mut raw = Raw {
        io: g,
        buf: BytesMut::new(),
    };
    assert_eq!(raw.next(true).await, Frame::Hello);
    raw.send(&[Out::Sync, Out::Frame(Frame::Hello)]).await;
    (host, task, raw)
}

#[tokio::test(flavor = "current_thread")]
async fn a_host_link_ends_with_an_error_on_each_kind_of_violation() {
    let cases: [(Vec<u8>, Violation); 4] = [
        (header(4, 1, 65537), Violation::Oversized { len: 65537 }),
        (vec![0x7f], Violation::UnknownKind { kind: 0x7f }),
        (
            header(4, 5, 1).into_iter().chain([0]).collect(),
            Violation::UnknownStream { id: 5 },
        ),
        (
            header(2, 2, 4).into_iter().chain([0; 4]).collect(),
            Violation::BadOpen { id: 2 },
        ),
    ];
    for (bytes, want) in cases {
        let (_host, task, mut raw) = host_facing_raw().await;
        raw.io.write_all(&bytes).await.unwrap();
        match bound("the link ends", task).await.unwrap() {
            Err(MuxError::Violation(v)) => assert_eq!(v, want),
            other => panic!("{want:?}: got {other:?}"),
        }
    }
    // DATA beyond the window of an accepted stream.
    let (host, task, mut raw) = host_facing_raw().await;
    let listener = host.listen(2025).unwrap();
    raw.send(&[Out::Frame(Frame::Open { id: 1, port: 2025 })])
        .await;
    let _s = bound("accept", listener.accept()).await.unwrap();
    assert_eq!(raw.next(false).await, Frame::Accept { id: 1 });
    let over: Vec<Out> = (0..5).map(|_| data(1, 65536)).collect();
    raw.send(&over).await;
    match bound("the link ends", task).await.unwrap() {
        Err(MuxError::Violation(Violation::OverWindow {
            id: 1,
            len: 65536,
            allowed: 0,
        })) => {}
        other => panic!("over the window: got {other:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_host_link_syncs_past_garbage_and_partial_frames_before_the_guests_hello() {
    let (h, mut g) = duplex(PIPE);
    // What an earlier guest session left in the pipe: a partial DATA, a bad kind, a
    // HELLO prefix cut short.
    let mut junk = header(4, 3, 60000);
    junk.extend_from_slice(&[7; 1000]);
    junk.push(0x42);
    junk.extend_from_slice(&frame::HELLO_PREFIX[..12]);
    g.write_all(&junk).await.unwrap();
    let (guest, _gt) = Link::start(g, Role::Guest);
    let (host, ht) = Link::start(h, Role::Host);
    let _echo = echo_server(guest.listen(7).unwrap());
    let mut s = bound("open", host.open(7)).await.unwrap();
    round_trip(&mut s, b"synced").await;
    assert!(!ht.is_finished());
}

/// A host link whose byte stream can be taken away mid-flight, as QEMU's chardev is when
/// the old bridge goes with a snapshot.
struct Session {
    host: Link,
    host_task: Task,
    stop: oneshot::Sender<()>,
    relay: JoinHandle<DuplexStream>,
}

fn session_over(guest_end: DuplexStream) -> Session {
    let (h, mut hx) = duplex(PIPE);
    let (host, host_task) = Link::start(h, Role::Host);
    let (stop, stopped) = oneshot::channel();
    let relay = tokio::spawn(async move {
        let mut guest_end = guest_end;
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut hx, &mut guest_end) => {}
            _ = stopped => {}
        }
        guest_end
    });
    Session {
        host,
        host_task,
        stop,
        relay,
    }
}

/// A guest link with an open stream each way through a first host session; then the
/// session goes, `junk` reaches the guest, and a fresh host link starts on the same bytes:
/// the old streams are reset and new ones work.
async fn restore_after(junk: impl FnOnce(u32) -> Vec<u8>) {
    let (g, gx) = duplex(PIPE);
    let (guest, guest_task) = Link::start(g, Role::Guest);
    let guest_listener = guest.listen(7).unwrap();
    let first = session_over(gx);
    let _host_echo = echo_server(first.host.listen(2025).unwrap());
    let mut old_in = bound("open", first.host.open(7)).await.unwrap();
    let mut old_guest_side = guest_listener.accept().await.unwrap();
    round_trip(&mut bound("open", guest.open(2025)).await.unwrap(), b"out").await;
    old_in.write_all(b"before").await.unwrap();
    let mut buf = [0u8; 6];
    old_guest_side.read_exact(&mut buf).await.unwrap();
    let mut old_out = guest.open(2025).await.unwrap();

    first.stop.send(()).unwrap();
    let mut gx = first.relay.await.unwrap();
    drop(first.host);
    // The old host end's pipe is gone: its link ends.
    let _ = bound("the old host link ends", first.host_task)
        .await
        .unwrap();
    gx.write_all(&junk(old_in.id())).await.unwrap();

    let (host, host_task) = Link::start(gx, Role::Host);
    let _echo = echo_server(guest_listener);
    let mut fresh = bound("open after the restore", host.open(7)).await.unwrap();
    round_trip(&mut fresh, &pattern::bytes(300_000, 3)).await;
    let mut back = bound("guest open", guest.open(2025)).await;
    // The new host end has no listener on 2025: refused, not hung.
    assert_eq!(
        back.as_mut().map(|_| ()).unwrap_err().kind(),
        io::ErrorKind::ConnectionRefused
    );
    let err = bound("old read", old_guest_side.read(&mut buf))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
    let err = old_out.write(b"x").await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
    assert!(!guest_task.is_finished() && !host_task.is_finished());
}

#[tokio::test(flavor = "current_thread")]
async fn a_restore_mid_frame_resets_the_guests_streams_and_new_ones_work() {
    restore_after(|_| {
        let mut partial = header(4, 2, 60000);
        partial.extend_from_slice(&[5; 1000]);
        partial
    })
    .await;
    // A header cut inside its length field: the zeros make it DATA of 0 bytes, a
    // violation; the guest scans on to the HELLO.
    restore_after(|_| header(4, 2, 1)[..6].to_vec()).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_guest_link_resets_on_violations_and_keeps_going() {
    restore_after(|_| vec![0x42, 1, 2, 3]).await;
    restore_after(|_| header(4, 2, 70000)).await;
    restore_after(|id| {
        let mut wire = BytesMut::new();
        (0..5).for_each(|_| data(id, 65536).encode(&mut wire));
        wire.to_vec()
    })
    .await;
    restore_after(|_| {
        let mut bad = BytesMut::new();
        Out::Frame(Frame::Hello).encode(&mut bad);
        let last = bad.len() - 1;
        bad[last] = 9;
        bad.put_slice(&header(4, 999, 1));
        bad.put_u8(1);
        assert_eq!(bad.len(), HEADER_LEN + 12 + HEADER_LEN + 1);
        bad.to_vec()
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_peer_that_sends_and_never_reads_cannot_grow_the_queue() {
    const PAIRS: usize = 100_000;
    let (h, g) = duplex(PIPE);
    let (host, _task) = Link::start(h, Role::Host);
    let (mut peer_in, mut peer_out) = tokio::io::split(g);
    // Refused opens, each answered with a RESET the host queues for a peer not reading.
    let flood = tokio::spawn(async move {
        let mut wire = BytesMut::new();
        Out::Frame(Frame::Hello).encode(&mut wire);
        for _ in 0..PAIRS {
            Out::Frame(Frame::Open { id: 1, port: 9 }).encode(&mut wire);
            Out::Frame(Frame::Reset { id: 1 }).encode(&mut wire);
        }
        peer_out.write_all(&wire).await.unwrap();
    });
    until("the host's answers pile up", || {
        host.queued_control() >= CONTROL_FRAMES
    })
    .await;
    for _ in 0..10_000 {
        tokio::task::yield_now().await;
    }
    // At most one read's worth of frames past the cap (a read is up to 128 KiB).
    let queued = host.queued_control();
    assert!(queued < CONTROL_FRAMES + 8_000, "{queued} frames queued");
    assert!(!flood.is_finished(), "the host kept reading");
    // Once the peer reads, the host reads again and answers everything.
    let drain = tokio::spawn(async move {
        let mut sink = vec![0u8; 1 << 16];
        while peer_in.read(&mut sink).await.is_ok_and(|n| n > 0) {}
    });
    bound("the flood is read", flood).await.unwrap();
    until("every answer is sent", || host.queued_control() == 0).await;
    drain.abort();
}
