//! The built binary, run as the runtime runs it: `berth-init bridge --serial … --uds-path …`.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::process::Stdio;

use berth_protocol::guest::VSOCK_PORT;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

use super::*;

const USAGE_START: &str = "usage: berth-init bridge --serial PATH --uds-path PATH\n";

/// Starts the bridge on `paths` and waits for both its sockets to exist.
async fn spawn_bridge(bin: &std::ffi::OsStr, paths: &Paths) -> Child {
    let mut child = Command::new(bin)
        .arg("bridge")
        .arg("--serial")
        .arg(&paths.options.serial)
        .arg("--uds-path")
        .arg(&paths.options.uds_path)
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    within(async {
        while !(paths.options.serial.exists() && paths.options.uds_path.exists()) {
            assert!(child.try_wait().unwrap().is_none(), "the bridge exited");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    child
}

/// The whole stderr of an exited child, and its exit code.
async fn finish(child: Child) -> (Option<i32>, String) {
    let out = within(child.wait_with_output()).await.unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_built_binary_bridges_then_exits_0_on_qemus_end_1_on_a_violation_2_on_usage() {
    let bin = std::env::var_os("BERTH_INIT_BIN").unwrap_or_default();
    if !Path::new(&bin).is_file() {
        let why = format!("BERTH_INIT_BIN ({bin:?}) names no built berth-init");
        berth_testkit::skip("berth-init", why);
        return;
    }

    let usage = within(Command::new(&bin).args(["bridge", "--serial"]).output())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&usage.stderr);
    assert_eq!(usage.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("berth-init bridge: --serial needs a value"),
        "{stderr}"
    );

    let help = within(Command::new(&bin).args(["bridge", "--help"]).output())
        .await
        .unwrap();
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).starts_with(USAGE_START));

    // Bridges, with both sockets private, and exits 0 when QEMU's connection ends.
    let paths = Paths::new();
    let child = spawn_bridge(&bin, &paths).await;
    for socket in [&paths.options.serial, &paths.options.uds_path] {
        let meta = std::fs::symlink_metadata(socket).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{socket:?}");
    }
    let guest = Guest::connect(&paths.options.serial).await;
    let (_server, _) = echo(&guest.link, VSOCK_PORT);
    let client = within(connect_client(&paths.options.uds_path, VSOCK_PORT))
        .await
        .unwrap();
    let data = pattern(1 << 20);
    assert!(within(echo_through(client, &data)).await.unwrap() == data);
    guest.qemu_exits();
    let (code, stderr) = finish(child).await;
    assert_eq!(code, Some(0), "{stderr}");

    // A guest that breaks the protocol after its HELLO: exit 1, one line naming it.
    let paths = Paths::new();
    let child = spawn_bridge(&bin, &paths).await;
    let mut qemu = UnixStream::connect(&paths.options.serial).await.unwrap();
    let mut hello = vec![0x01, 0, 0, 0, 0, 0, 0, 0, 12];
    hello.extend_from_slice(b"berthmux");
    hello.extend_from_slice(&1u32.to_be_bytes());
    hello.push(0xee);
    qemu.write_all(&hello).await.unwrap();
    let (code, stderr) = finish(child).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("unknown frame kind 0xee"), "{stderr}");
    drop(qemu);
    drop(paths.dir);
}
