//! The resume arguments: once a harness has run on this volume, every start gets the
//! template's `resume_args` with `{session}` filled from the session file the harness wrote
//! (read as the box user, at most [`MAX_SESSION`] bytes) or the template's fixed session.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use berth_protocol::guest::BoxUser;
use berth_protocol::harness::HarnessConfig;

use crate::files::FsIdentity;

pub const MAX_SESSION: u64 = 256;
const PLACEHOLDER: &str = "{session}";

/// Reads the session file with the box user's file-system identity (so a symlink to a
/// root-only file is refused), without blocking on a FIFO; `None` when absent, empty, not
/// a regular file or not text.
pub fn read_session(path: &Path) -> Option<String> {
    let _identity = FsIdentity::enter(BoxUser::User);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut raw = Vec::new();
    file.take(MAX_SESSION).read_to_end(&mut raw).ok()?;
    let text = String::from_utf8(raw).ok()?;
    let id = text.trim();
    (!id.is_empty()).then(|| id.to_owned())
}

/// The arguments of one start.
#[derive(Debug, PartialEq, Eq)]
pub struct StartArgs {
    pub argv: Vec<String>,
    pub resumed: bool,
    /// Why the resume arguments were left out, if they were.
    pub note: Option<String>,
}

pub fn start_args(config: &HarnessConfig, has_run: bool, session: Option<String>) -> StartArgs {
    let mut argv = config.command.clone();
    if !has_run || config.resume_args.is_empty() {
        return StartArgs {
            argv,
            resumed: false,
            note: None,
        };
    }
    let needs_session = config.resume_args.iter().any(|a| a.contains(PLACEHOLDER));
    let session = session.or_else(|| config.session.clone());
    match session {
        None if needs_session => StartArgs {
            argv,
            resumed: false,
            note: Some(
                "no session to resume (no session file and no fixed session): starting fresh"
                    .to_owned(),
            ),
        },
        session => {
            let id = session.unwrap_or_default();
            argv.extend(
                config
                    .resume_args
                    .iter()
                    .map(|a| a.replace(PLACEHOLDER, &id)),
            );
            StartArgs {
                argv,
                resumed: true,
                note: None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(v: serde_json::Value) -> HarnessConfig {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn resume_args_are_filled_from_the_session() {
        let c = config(json!({"command":["agent"],"resume_args":["--resume","{session}"]}));
        assert_eq!(start_args(&c, false, Some("s".into())).argv, ["agent"]);
        let resumed = start_args(&c, true, Some("abc".into()));
        assert_eq!(resumed.argv, ["agent", "--resume", "abc"]);
        assert!(resumed.resumed);
        let none = start_args(&c, true, None);
        assert_eq!(none.argv, ["agent"]);
        assert!(!none.resumed && none.note.is_some());
        let fixed =
            config(json!({"command":["a"],"resume_args":["--continue={session}"],"session":"f"}));
        assert_eq!(start_args(&fixed, true, None).argv, ["a", "--continue=f"]);
        let plain = config(json!({"command":["a"],"resume_args":["--continue"]}));
        assert_eq!(start_args(&plain, true, None).argv, ["a", "--continue"]);
    }

    #[test]
    fn the_session_file_is_read_carefully() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let path = dir.path().join("session");
        assert_eq!(read_session(&path), None);
        std::fs::write(&path, " abc \n").unwrap();
        assert_eq!(read_session(&path).as_deref(), Some("abc"));
        std::fs::write(&path, "x".repeat(1000)).unwrap();
        assert_eq!(read_session(&path).unwrap().len(), MAX_SESSION as usize);
        // A symlink to a root-only file is not followed into it.
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "root-only").unwrap();
        std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        if nix::unistd::geteuid().is_root() {
            assert_eq!(read_session(&link), None);
        }
    }
}
