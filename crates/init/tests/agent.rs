//! Runs the real `berth-init` binary (as root, not as PID 1) with `--run-dir` in a temp
//! directory and talks to it with the host's own client, `berth_runtime::GuestClient`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::{Duration, Instant};

use berth_protocol::guest::{Environment, ExecFrame, BOX_USER_UID};
use berth_protocol::ErrorCode;
use berth_runtime::{BootToken, GuestAddr, GuestClient};

use common::{remote_code, sh, wait_gone, Agent};

#[path = "agent/common.rs"]
mod common;
#[path = "agent/exec.rs"]
mod exec;
#[path = "agent/files.rs"]
mod files;
#[path = "agent/listed.rs"]
mod listed;
#[path = "agent/ports.rs"]
mod ports;
#[path = "agent/process.rs"]
mod process;
#[path = "agent/terminal.rs"]
mod terminal;

#[tokio::test]
async fn info_reports_the_boot() {
    let agent = Agent::start();
    let info = agent.client.info().await.unwrap();
    assert_eq!(info.protocol_version, berth_protocol::PROTOCOL_VERSION);
    assert_eq!(info.agent_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(info.boot_id.len(), 32);
    assert_eq!(info.environment, Environment::Sandbox);
    let phases: Vec<_> = info.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        phases,
        ["mount", "seal", "volume", "egress", "harness", "services", "serve"]
    );
    // The token file is consumed at boot.
    assert!(!agent.dir.path().join("run/token").exists());
    let mode = std::fs::metadata(agent.socket())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test]
async fn calls_need_the_token_and_a_known_version() {
    let agent = Agent::start();
    let wrong = GuestClient::new(
        GuestAddr::Unix(agent.socket()),
        BootToken::from_random([7; 32]),
    );
    assert_eq!(
        remote_code(wrong.info().await.unwrap_err()),
        (401, ErrorCode::Unauthorized)
    );
    let answer = agent.raw("GET /v1/info HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    let head = format!(
        "GET /v1/info HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\nberth-protocol: 0\r\nconnection: close\r\n\r\n",
        agent.token.as_str()
    );
    let answer = agent.raw(&head);
    assert!(
        answer.starts_with("HTTP/1.1 400") && answer.contains("invalid_request"),
        "{answer}"
    );
    let head = format!(
        "PUT /v1/files?path=/tmp/big HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-length: 300000000\r\nconnection: close\r\n\r\n",
        agent.token.as_str()
    );
    let answer = agent.raw(&head);
    assert!(
        answer.starts_with("HTTP/1.1 413") && answer.contains("payload_too_large"),
        "{answer}"
    );
}

#[tokio::test]
async fn the_memory_skeleton_is_made_for_the_box_user() {
    let agent = Agent::start();
    let memory = agent.dir.path().join("memory");
    let readme = std::fs::read_to_string(memory.join("README.md")).unwrap();
    assert!(readme.starts_with("# Persistent memory"));
    for dir in ["entities", "comms", "timeline", "workstreams"] {
        let meta = std::fs::metadata(memory.join(dir)).unwrap();
        assert!(meta.is_dir());
        assert_eq!((meta.uid(), meta.gid()), (BOX_USER_UID, BOX_USER_UID));
    }
}

#[tokio::test]
async fn shutdown_stops_every_process_and_exits_zero() {
    let mut agent = Agent::start();
    let mut stream = agent
        .client
        .exec(&sh("trap '' TERM; sleep 60 & echo $!; wait"))
        .await
        .unwrap();
    let Some(ExecFrame::Started { pid }) = stream.next_frame().await.unwrap() else {
        panic!("no started frame")
    };
    let Some(ExecFrame::Stdout { .. }) = stream.next_frame().await.unwrap() else {
        panic!("no stdout frame")
    };
    agent.client.shutdown().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = agent.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "berth-init did not exit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success());
    wait_gone(pid).await;
    assert!(!agent.socket().exists());
}
