//! What a client that did not start a program or write a file sees of it (protocol version
//! 5, what E2B's `commands.list`, `files.get_info` and `files.rename` need): a process's and
//! a terminal's tag, working directory and added variables; a file's owner and link target;
//! a rename.

use std::collections::BTreeMap;

use berth_protocol::guest::{BoxUser, FileKind, FileMove};
use berth_protocol::process::ProcessRequest;
use berth_protocol::terminal::TerminalRequest;
use berth_protocol::ErrorCode;

use super::common::{remote_code, sh, Agent};

#[tokio::test]
async fn processes_and_terminals_are_listed_with_what_started_them() {
    let agent = Agent::start();
    let c = &agent.client;
    let mut exec = sh("sleep 100");
    exec.env = BTreeMap::from([("COLOR".to_owned(), "blue".to_owned())]);
    exec.cwd = Some("/tmp".into());
    let started = c
        .process_start(&ProcessRequest {
            exec,
            keep_awake: true,
            open_stdin: false,
            tag: Some("web server".into()),
        })
        .await
        .unwrap();
    let listed = c.processes().await.unwrap().processes;
    let found = listed.iter().find(|p| p.id == started.id).unwrap();
    assert_eq!(found.tag.as_deref(), Some("web server"));
    assert_eq!(found.cwd.as_deref(), Some("/tmp"));
    assert_eq!(found.env.get("COLOR").map(String::as_str), Some("blue"));
    c.process_signal(&started.id, "KILL").await.unwrap();

    let terminal = c
        .terminal_open(&TerminalRequest {
            argv: vec!["sleep".into(), "100".into()],
            tag: Some("pty".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let terminals = c.terminals().await.unwrap().terminals;
    assert_eq!(terminals.len(), 1);
    assert_eq!(
        (terminals[0].id.as_str(), terminals[0].tag.as_deref()),
        (terminal.id.as_str(), Some("pty"))
    );
    assert_eq!(terminals[0].pid, terminal.pid);
    c.terminal_signal(&terminal.id, "KILL").await.unwrap();

    let bad_tag = ProcessRequest {
        exec: sh("true"),
        keep_awake: false,
        open_stdin: false,
        tag: Some("two\nlines".into()),
    };
    let err = c.process_start(&bad_tag).await.unwrap_err();
    assert_eq!(remote_code(err), (400, ErrorCode::InvalidRequest));
}

#[tokio::test]
async fn a_rename_answers_the_new_entry_and_keeps_the_users_permissions() {
    let agent = Agent::start();
    let c = &agent.client;
    let home = agent.home();
    std::fs::write(home.join("a.txt"), b"hi").unwrap();
    std::os::unix::fs::symlink("a.txt", home.join("link")).unwrap();
    let path = |rel: &str| home.join(rel).to_string_lossy().into_owned();
    let moved = c
        .move_file(&FileMove {
            from: path("link"),
            to: path("renamed"),
            user: BoxUser::Root,
        })
        .await
        .unwrap();
    assert_eq!(moved.name, "renamed");
    assert_eq!(moved.kind, FileKind::Symlink);
    assert_eq!(moved.symlink_target.as_deref(), Some("a.txt"));
    assert_eq!(moved.owner.as_deref(), Some("root"));
    // The box user may not move what only root may write.
    let root_dir = home.join("root-only");
    std::fs::create_dir(&root_dir).unwrap();
    std::fs::write(root_dir.join("f"), b"x").unwrap();
    let err = c
        .move_file(&FileMove {
            from: path("root-only/f"),
            to: path("stolen"),
            user: BoxUser::User,
        })
        .await
        .unwrap_err();
    assert_eq!(remote_code(err).1, ErrorCode::PermissionDenied);
    assert!(root_dir.join("f").exists());
    let relative = FileMove {
        from: "a.txt".into(),
        to: path("b"),
        user: BoxUser::User,
    };
    let err = c.move_file(&relative).await.unwrap_err();
    assert_eq!(remote_code(err).0, 400);
}
