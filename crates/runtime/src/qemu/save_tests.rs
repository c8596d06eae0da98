//! A save that fails after the guest was halted continues the guest, against a fake QEMU
//! (`fake_qmp.rs`): the snapshot's record cannot be written (a directory stands where it
//! goes), so nothing is kept, the guest runs again, and a refused `cont` is the error.

use std::ffi::OsString;

use super::fake_qmp::{FakeQmp, STREAM_BYTES};
use super::launch_record::LaunchRecord;
use super::qmp::Qmp;
use super::snapshot::{save_or_continue, SaveError, SaveTo};
use crate::vm::snapshot::KeptSnapshot;
use crate::vm::VmPaths;

struct Setup {
    dir: tempfile::TempDir,
    kept: KeptSnapshot,
    socket: std::path::PathBuf,
    launch: LaunchRecord,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let kept = KeptSnapshot::of(&VmPaths::at(dir.path()), super::snapshot::FILES);
    kept.renew().unwrap();
    let socket = dir.path().join("migration.sock");
    let args = ["-m", "64M", "-smp", "1"].map(OsString::from);
    Setup {
        kept,
        socket,
        launch: LaunchRecord::of(&args, 64),
        dir,
    }
}

fn owner() -> (u32, u32) {
    // SAFETY: getuid(2) and getgid(2) cannot fail.
    unsafe { (libc::getuid(), libc::getgid()) }
}

async fn save(setup: &Setup, qmp: &FakeQmp) -> Result<u64, SaveError> {
    let mut client = Qmp::connect(&qmp.socket).await.unwrap();
    let to = SaveTo {
        snapshot: &setup.kept,
        socket: &setup.socket,
        owner: owner(),
        launch: &setup.launch,
    };
    save_or_continue(&mut client, to).await
}

#[tokio::test]
async fn a_save_keeps_the_state_and_its_record_and_leaves_the_guest_halted() {
    let setup = setup();
    let qmp = FakeQmp::serve(setup.dir.path(), &setup.socket, &[]);
    let bytes = save(&setup, &qmp).await.unwrap();
    assert_eq!(bytes, STREAM_BYTES as u64);
    assert!(setup.kept.exists());
    let seen = qmp.seen();
    assert!(!seen.contains(&"cont".to_owned()), "{seen:?}");
    assert_eq!(seen[1], "stop");
}

#[tokio::test]
async fn a_record_that_cannot_be_written_discards_the_snapshot_and_continues_the_guest() {
    let setup = setup();
    std::fs::create_dir(setup.kept.file("launch.json")).unwrap();
    let qmp = FakeQmp::serve(setup.dir.path(), &setup.socket, &[]);
    let err = save(&setup, &qmp).await.unwrap_err();
    assert!(matches!(err, SaveError::Record { .. }), "{err:?}");
    assert!(!setup.kept.exists());
    assert!(!setup.kept.file("state").exists());
    let seen = qmp.seen();
    assert_eq!(seen[1], "stop", "{seen:?}");
    assert_eq!(seen.last().map(String::as_str), Some("cont"), "{seen:?}");
}

#[tokio::test]
async fn a_refused_cont_after_a_failed_save_is_the_error() {
    let setup = setup();
    std::fs::create_dir(setup.kept.file("launch.json")).unwrap();
    let qmp = FakeQmp::serve(setup.dir.path(), &setup.socket, &["cont"]);
    let err = save(&setup, &qmp).await.unwrap_err();
    let SaveError::NotContinued { failed, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(matches!(**failed, SaveError::Record { .. }), "{err:?}");
    let chain = crate::error_chain(&err);
    assert!(chain.contains("stays halted"), "{chain}");
    assert!(chain.contains("cont refused"), "{chain}");
    assert_eq!(qmp.seen().last().map(String::as_str), Some("cont"));
}

#[tokio::test]
async fn a_failed_migration_continues_the_guest_too() {
    let setup = setup();
    let qmp = FakeQmp::serve(setup.dir.path(), &setup.socket, &["migrate"]);
    let err = save(&setup, &qmp).await.unwrap_err();
    assert!(matches!(err, SaveError::Migration(_)), "{err:?}");
    assert!(!setup.kept.exists());
    assert_eq!(qmp.seen().last().map(String::as_str), Some("cont"));
}
