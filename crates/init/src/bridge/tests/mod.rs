//! The bridge against the real engine: a "guest" is a guest-role [`Link`] whose bytes a
//! "QEMU" task carries to the bridge's `--serial` socket, as QEMU's chardev would; host
//! clients are Unix sockets speaking the hybrid vsock request.

mod guest_opens;
mod host_clients;
mod process;
mod restore;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_protocol::guest::VSOCK_PORT;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Bridge, BridgeError, Options};
use crate::mux::{Link, MuxError, Role};

/// How long any one wait in these tests may take before the test fails (a loaded 2-core
/// machine runs them: generous, and only ever reached by a broken bridge).
const PATIENCE: Duration = Duration::from_secs(60);

/// The bridge's sockets in a temporary directory.
struct Paths {
    dir: tempfile::TempDir,
    options: Options,
}

impl Paths {
    fn new() -> Paths {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            serial: dir.path().join("serial.sock"),
            uds_path: dir.path().join("vsock.sock"),
        };
        Paths { dir, options }
    }

    /// Where a guest stream to `port` is delivered.
    fn host_port(&self, port: u32) -> PathBuf {
        super::guest_opens::target(&self.options.uds_path, port)
    }
}

/// Binds a bridge and serves it on a task.
fn start_bridge(
    options: &Options,
    line_timeout: Option<Duration>,
) -> JoinHandle<Result<(), BridgeError>> {
    let mut bridge = Bridge::bind(options).unwrap();
    if let Some(timeout) = line_timeout {
        bridge.line_timeout = timeout;
    }
    tokio::spawn(bridge.serve())
}

/// A guest link and the "QEMU" carrying its bytes to the bridge.
struct Guest {
    link: Link,
    driver: JoinHandle<Result<(), MuxError>>,
    qemu: JoinHandle<()>,
}

impl Guest {
    /// Starts a guest link and connects it to the bridge's `serial` socket.
    async fn connect(serial: &Path) -> Guest {
        let (port, qemu_end) = tokio::io::duplex(64 * 1024);
        let (link, driver) = Link::start(port, Role::Guest);
        let chardev = UnixStream::connect(serial).await.unwrap();
        let qemu = tokio::spawn(carry(qemu_end, chardev));
        Guest { link, driver, qemu }
    }

    /// QEMU exits: its chardev connection closes.
    fn qemu_exits(&self) {
        self.qemu.abort();
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        self.qemu.abort();
        self.driver.abort();
    }
}

/// A bridge with a guest that echoes on [`VSOCK_PORT`].
struct Echoing {
    paths: Paths,
    bridge: JoinHandle<Result<(), BridgeError>>,
    guest: Guest,
    outcomes: mpsc::UnboundedReceiver<io::Result<u64>>,
    _server: JoinHandle<()>,
}

impl Echoing {
    async fn start(line_timeout: Option<Duration>) -> Echoing {
        let paths = Paths::new();
        let bridge = start_bridge(&paths.options, line_timeout);
        let guest = Guest::connect(&paths.options.serial).await;
        let (server, outcomes) = echo(&guest.link, VSOCK_PORT);
        Echoing {
            paths,
            bridge,
            guest,
            outcomes,
            _server: server,
        }
    }

    /// A client's round trip through the bridge to the guest's echo.
    async fn ping(&self) {
        let client = within(connect_client(&self.paths.options.uds_path, VSOCK_PORT))
            .await
            .unwrap();
        assert_eq!(
            within(echo_through(client, b"ping")).await.unwrap(),
            b"ping"
        );
    }
}

/// Carries bytes between the guest's port and the chardev socket until either ends.
async fn carry(mut port: DuplexStream, mut chardev: UnixStream) {
    let _ = tokio::io::copy_bidirectional(&mut port, &mut chardev).await;
}

/// Serves an echo on the guest's `port`: each stream gets back what it sent, then a
/// shutdown. Each stream's outcome (bytes echoed, or the error) is reported.
fn echo(link: &Link, port: u32) -> (JoinHandle<()>, mpsc::UnboundedReceiver<io::Result<u64>>) {
    let listener = link.listen(port).unwrap();
    let (report, outcomes) = mpsc::unbounded_channel();
    let server = tokio::spawn(async move {
        while let Ok(stream) = listener.accept().await {
            let report = report.clone();
            tokio::spawn(async move {
                let (mut reader, mut writer) = tokio::io::split(stream);
                let result = async {
                    let n = tokio::io::copy(&mut reader, &mut writer).await?;
                    writer.shutdown().await?;
                    Ok(n)
                }
                .await;
                let _ = report.send(result);
            });
        }
    });
    (server, outcomes)
}

/// A host client's hybrid vsock handshake, as `berth_runtime`'s guest client does it:
/// `Ok` with the stream after `OK <n>\n`, an error when the bridge closed without one.
async fn connect_client(uds_path: &Path, port: u32) -> io::Result<UnixStream> {
    let mut client = UnixStream::connect(uds_path).await?;
    client
        .write_all(format!("CONNECT {port}\n").as_bytes())
        .await?;
    let reply = read_reply(&mut client).await?;
    if reply.starts_with("OK ") && reply[3..].trim_end().parse::<u64>().is_ok() {
        Ok(client)
    } else {
        Err(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!("no OK: {reply:?}"),
        ))
    }
}

/// Reads a byte at a time up to a newline or the end (nothing past it is consumed).
async fn read_reply(client: &mut UnixStream) -> io::Result<String> {
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while reply.len() < 64 && !reply.ends_with(b"\n") {
        if client.read(&mut byte).await? == 0 {
            break;
        }
        reply.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// Asserts the bridge closes `client` without a byte: its end of file, or the reset a
/// Unix socket reports when closed with unread data.
async fn assert_closed_without_reply(client: &mut UnixStream) {
    let mut buf = [0u8; 64];
    match within(client.read(&mut buf)).await {
        Ok(0) => {}
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
        other => panic!("expected the bridge to close the client, got {other:?}"),
    }
}

/// `fut`, or a test failure after [`PATIENCE`].
async fn within<F: std::future::Future>(fut: F) -> F::Output {
    tokio::time::timeout(PATIENCE, fut)
        .await
        .expect("waited past the test's patience")
}

/// `len` bytes no HELLO prefix can hide in (no 0x01 byte at all).
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 | 0x80).collect()
}

/// Writes `data` and shuts the write half while reading everything back; returns what came
/// back before the bridge's end of file.
async fn echo_through(client: UnixStream, data: &[u8]) -> io::Result<Vec<u8>> {
    let (mut reader, mut writer) = client.into_split();
    let data = data.to_vec();
    let writing = tokio::spawn(async move {
        writer.write_all(&data).await?;
        writer.shutdown().await
    });
    let mut back = Vec::new();
    reader.read_to_end(&mut back).await?;
    writing.await.unwrap()?;
    Ok(back)
}
