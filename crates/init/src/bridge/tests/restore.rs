//! A restore as the bridge sees it: QEMU comes back with the guest as it was and connects
//! to a new bridge, while the old bridge (and whatever it had half sent or half received)
//! is gone. Here "QEMU" cuts both directions inside a frame (a DATA frame's payload, a
//! header's length field: wherever the bytes are at that moment) while a client streams
//! through the old bridge, then carries the guest's bytes to a new bridge on the same
//! paths.

use berth_protocol::guest::VSOCK_PORT;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use super::*;

/// Where a reader of one direction is in the frame stream (the format in the contract:
/// PAD is one zero byte; every other frame a kind byte, a stream id, a length, a payload).
#[derive(Debug, Default)]
enum Position {
    #[default]
    Between,
    /// The kind byte and `got` bytes of the id and length read.
    Header {
        got: Vec<u8>,
    },
    Payload {
        left: u32,
    },
}

impl Position {
    fn step(&mut self, byte: u8) {
        *self = match std::mem::take(self) {
            Position::Between if byte == 0 => Position::Between,
            Position::Between => Position::Header { got: Vec::new() },
            Position::Header { mut got } => {
                got.push(byte);
                if got.len() < 8 {
                    Position::Header { got }
                } else {
                    match u32::from_be_bytes(got[4..8].try_into().unwrap()) {
                        0 => Position::Between,
                        left => Position::Payload { left },
                    }
                }
            }
            Position::Payload { left } if left > 1 => Position::Payload { left: left - 1 },
            Position::Payload { .. } => Position::Between,
        }
    }

    /// Inside a frame: its kind byte read, not all of it.
    fn mid_frame(&self) -> bool {
        !matches!(self, Position::Between)
    }
}

/// Follows one direction's `chunk` from `here`; once `armed` and the other direction is
/// inside a frame (`there`), finds where this one is first inside a frame too: the bytes to
/// pass on before the cut. `None`: pass it all on.
fn cut_point(here: &mut Position, there: &Position, chunk: &[u8], armed: bool) -> Option<usize> {
    let cutting = armed && there.mid_frame();
    for (i, &byte) in chunk.iter().enumerate() {
        here.step(byte);
        if cutting && here.mid_frame() {
            return Some(i + 1);
        }
    }
    None
}

/// "QEMU" with the old bridge: carries both ways until `arm` fired and both directions
/// can be cut inside a frame at once (one at the end of what it last passed on, the other
/// within the chunk at hand), then closes the old bridge's connection. Cutting both at once
/// keeps both flowing until then: neither waits for credit the other would have carried.
/// Returns the guest's bytes past the cut, for the new bridge.
async fn carry_until_cut(
    port: &mut DuplexStream,
    chardev: UnixStream,
    mut arm: oneshot::Receiver<()>,
) -> Vec<u8> {
    let (mut from_bridge, mut to_bridge) = chardev.into_split();
    let (mut from_guest, mut to_guest) = tokio::io::split(port);
    let (mut to_host_at, mut to_guest_at) = (Position::default(), Position::default());
    let (mut gbuf, mut bbuf) = (vec![0u8; 4096], vec![0u8; 4096]);
    let mut armed = false;
    loop {
        tokio::select! {
            _ = &mut arm, if !armed => armed = true,
            n = from_guest.read(&mut gbuf) => {
                let chunk = &gbuf[..n.unwrap()];
                assert!(!chunk.is_empty(), "the guest's port closed");
                let cut = cut_point(&mut to_host_at, &to_guest_at, chunk, armed);
                to_bridge.write_all(&chunk[..cut.unwrap_or(chunk.len())]).await.unwrap();
                if let Some(at) = cut {
                    return chunk[at..].to_vec();
                }
            }
            n = from_bridge.read(&mut bbuf) => {
                let chunk = &bbuf[..n.unwrap()];
                assert!(!chunk.is_empty(), "the old bridge closed first");
                let cut = cut_point(&mut to_guest_at, &to_host_at, chunk, armed);
                to_guest.write_all(&chunk[..cut.unwrap_or(chunk.len())]).await.unwrap();
                // The rest of the guest's frame is lost with the old bridge.
                if cut.is_some() {
                    return Vec::new();
                }
            }
        }
    }
}

#[tokio::test]
async fn a_new_bridge_resyncs_with_a_guest_cut_mid_frame_both_ways() {
    let paths = Paths::new();
    let old_bridge = start_bridge(&paths.options, None);
    let (mut port, qemu_end) = tokio::io::duplex(64 * 1024);
    let (guest, _driver) = Link::start(qemu_end, Role::Guest);
    let (_server, mut outcomes) = echo(&guest, VSOCK_PORT);
    let chardev = UnixStream::connect(&paths.options.serial).await.unwrap();
    let (arm, armed) = oneshot::channel();
    let qemu = tokio::spawn(async move {
        let held = carry_until_cut(&mut port, chardev, armed).await;
        (port, held)
    });

    // A client streams through the old bridge; once data flows both ways, "QEMU" cuts.
    let client = within(connect_client(&paths.options.uds_path, VSOCK_PORT))
        .await
        .unwrap();
    let (mut reader, mut writer) = client.into_split();
    let streaming = tokio::spawn(async move {
        let data = pattern(64 * 1024);
        while writer.write_all(&data).await.is_ok() {}
    });
    let mut first = vec![0u8; 128 * 1024];
    within(reader.read_exact(&mut first)).await.unwrap();
    // Read on, so that the echo keeps flowing until the cut.
    let draining = tokio::spawn(async move {
        let mut sink = vec![0u8; 64 * 1024];
        while matches!(reader.read(&mut sink).await, Ok(n) if n > 0) {}
    });
    arm.send(()).unwrap();
    let (mut port, held) = within(qemu).await.unwrap();
    within(old_bridge).await.unwrap().unwrap();
    // The old bridge took its client with it.
    within(draining).await.unwrap();
    within(streaming).await.unwrap();

    // The new bridge gets the tail of the guest's cut frame first, then what follows.
    let new_bridge = start_bridge(&paths.options, None);
    let mut chardev = UnixStream::connect(&paths.options.serial).await.unwrap();
    chardev.write_all(&held).await.unwrap();
    let _qemu = tokio::spawn(async move {
        let _ = tokio::io::copy_bidirectional(&mut port, &mut chardev).await;
    });

    // The guest reset the stream of the old link when the new HELLO came.
    let old = within(outcomes.recv()).await.unwrap().unwrap_err();
    assert_eq!(old.kind(), io::ErrorKind::ConnectionReset, "{old}");
    let client = within(connect_client(&paths.options.uds_path, VSOCK_PORT))
        .await
        .unwrap();
    let data = pattern(200 * 1024);
    assert!(within(echo_through(client, &data)).await.unwrap() == data);
    assert!(!new_bridge.is_finished());
}
