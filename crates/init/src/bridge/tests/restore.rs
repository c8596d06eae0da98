//! A restore as the bridge sees it: QEMU comes back with the guest as it was and connects
//! to a new bridge, while the old bridge (and whatever it had half sent or half received)
//! is gone. Here "QEMU" cuts both directions in the middle of a DATA frame while a client
//! streams through the old bridge, then carries the guest's bytes to a new bridge on the
//! same paths.

use berth_protocol::guest::VSOCK_PORT;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use super::*;

const DATA: u8 = 0x04;

/// Where a reader of one direction is in the frame stream (kinds as in the contract).
#[derive(Debug, Default)]
enum Position {
    #[default]
    Kind,
    Header {
        kind: u8,
        got: Vec<u8>,
    },
    Payload {
        kind: u8,
        read: u32,
        left: u32,
    },
}

impl Position {
    fn step(&mut self, byte: u8) {
        *self = match std::mem::take(self) {
            Position::Kind if byte == 0 => Position::Kind,
            Position::Kind => Position::Header {
                kind: byte,
                got: Vec::new(),
            },
            Position::Header { kind, mut got } => {
                got.push(byte);
                if got.len() < 8 {
                    Position::Header { kind, got }
                } else {
                    match u32::from_be_bytes(got[4..8].try_into().unwrap()) {
                        0 => Position::Kind,
                        left => Position::Payload {
                            kind,
                            read: 0,
                            left,
                        },
                    }
                }
            }
            Position::Payload { kind, read, left } if left > 1 => Position::Payload {
                kind,
                read: read + 1,
                left: left - 1,
            },
            Position::Payload { .. } => Position::Kind,
        }
    }

    /// Inside a DATA payload, with bytes of it on both sides.
    fn mid_data(&self) -> bool {
        matches!(self, Position::Payload { kind: DATA, read, .. } if *read >= 1)
    }
}

/// Carries one direction's chunk up to the point where, once `armed`, the frame stream is
/// in the middle of a DATA frame: returns how much of `chunk` to pass on, and whether the
/// cut is there.
fn cut_point(position: &mut Position, chunk: &[u8], armed: bool) -> (usize, bool) {
    for (i, &byte) in chunk.iter().enumerate() {
        position.step(byte);
        if armed && position.mid_data() {
            return (i + 1, true);
        }
    }
    (chunk.len(), false)
}

/// "QEMU" with the old bridge: carries both ways until `arm` fires, then cuts each
/// direction mid-DATA. Returns the guest's bytes the old bridge never got (they go to
/// the new one), having closed the old bridge's connection.
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
    let mut held: Option<Vec<u8>> = None;
    let mut guest_cut = false;
    while held.is_none() || !guest_cut {
        tokio::select! {
            _ = &mut arm, if !armed => armed = true,
            n = from_guest.read(&mut gbuf), if held.is_none() => {
                let chunk = &gbuf[..n.unwrap()];
                assert!(!chunk.is_empty(), "the guest's port closed");
                let (pass, cut) = cut_point(&mut to_host_at, chunk, armed);
                to_bridge.write_all(&chunk[..pass]).await.unwrap();
                if cut {
                    held = Some(chunk[pass..].to_vec());
                }
            }
            n = from_bridge.read(&mut bbuf), if !guest_cut => {
                let chunk = &bbuf[..n.unwrap()];
                assert!(!chunk.is_empty(), "the old bridge closed first");
                let (pass, cut) = cut_point(&mut to_guest_at, chunk, armed);
                to_guest.write_all(&chunk[..pass]).await.unwrap();
                // The rest of this frame is lost with the old bridge.
                guest_cut = cut;
            }
        }
    }
    held.unwrap()
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
    arm.send(()).unwrap();
    let (mut port, held) = within(qemu).await.unwrap();
    within(old_bridge).await.unwrap().unwrap();
    // The old bridge took its client with it.
    let mut rest = Vec::new();
    let _ = within(reader.read_to_end(&mut rest)).await;
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
