//! The box's own environment: `<run dir>/env.json`, written by the host before start (the
//! placeholders of the box's credential rules, e.g. `ANTHROPIC_API_KEY=berth-ph-…`).
//!
//! Read once at boot and deleted right after reading, like the boot token, so the box's
//! processes never find the file later; the map then lives only in this process and in
//! the environments it hands out ([`crate::exec::Executor`]): base environment < box
//! environment < the request's (or the harness config's) own `env`.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use berth_protocol::guest::BOX_ENV_FILE;

#[derive(Debug, thiserror::Error)]
pub enum BoxEnvError {
    #[error("egress phase: cannot read the box environment {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("egress phase: cannot delete the box environment {path}")]
    Delete {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("egress phase: the box environment {path} is not a JSON object of strings")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The name is shown (it is not secret); the value never is.
    #[error("egress phase: the box environment {path} has a bad entry {name:?}: {reason}")]
    BadEntry {
        path: PathBuf,
        name: String,
        reason: &'static str,
    },
}

/// Reads, deletes and checks `<run_dir>/env.json`. An absent file is an empty map.
pub fn take(run_dir: &Path) -> Result<BTreeMap<String, String>, BoxEnvError> {
    let path = run_dir.join(BOX_ENV_FILE);
    let raw = match std::fs::read(&path) {
        Ok(raw) => raw,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => return Err(BoxEnvError::Read { path, source }),
    };
    // Deleted before it is even parsed: a bad file must not stay behind either.
    std::fs::remove_file(&path).map_err(|source| BoxEnvError::Delete {
        path: path.clone(),
        source,
    })?;
    let env: BTreeMap<String, String> =
        serde_json::from_slice(&raw).map_err(|source| BoxEnvError::Parse {
            path: path.clone(),
            source,
        })?;
    for (name, value) in &env {
        let reason = if name.is_empty() {
            "the name is empty"
        } else if name.contains('=') {
            "the name contains '='"
        } else if name.contains('\0') {
            "the name contains a NUL byte"
        } else if value.contains('\0') {
            "the value contains a NUL byte"
        } else {
            continue;
        };
        return Err(BoxEnvError::BadEntry {
            path,
            name: name.replace('\0', "\\0"),
            reason,
        });
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take_from(content: &str) -> (Result<BTreeMap<String, String>, BoxEnvError>, bool) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(BOX_ENV_FILE), content).unwrap();
        let result = take(dir.path());
        (result, dir.path().join(BOX_ENV_FILE).exists())
    }

    #[test]
    fn the_file_is_read_once_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(BOX_ENV_FILE);
        std::fs::write(&path, r#"{"ANTHROPIC_API_KEY":"berth-ph-1","EMPTY":""}"#).unwrap();
        let env = take(dir.path()).unwrap();
        assert_eq!(env["ANTHROPIC_API_KEY"], "berth-ph-1");
        assert_eq!(env["EMPTY"], "");
        assert_eq!(env.len(), 2);
        assert!(!path.exists());
        // Absent (also the second time): empty.
        assert!(take(dir.path()).unwrap().is_empty());
    }

    #[test]
    fn bad_files_fail_naming_the_file_and_are_deleted_too() {
        for (content, wanted) in [
            ("{", "not a JSON object"),
            (r#"["A"]"#, "not a JSON object"),
            (r#"{"A":1}"#, "not a JSON object"),
            (r#"{"":"x"}"#, "the name is empty"),
            (r#"{"A=B":"x"}"#, "'='"),
            (r#"{"A\u0000":"x"}"#, "the name contains a NUL"),
            (r#"{"A":"x\u0000y"}"#, "the value contains a NUL"),
        ] {
            let (result, left) = take_from(content);
            let err = result.unwrap_err();
            let text = err.to_string();
            assert!(text.contains(wanted), "{content}: {text}");
            assert!(text.contains(BOX_ENV_FILE), "{text}");
            assert!(!text.contains("x\0y") && !text.contains("\"x\""), "{text}");
            assert!(!left, "{content} stayed behind");
        }
    }

    #[test]
    fn an_unreadable_path_is_a_read_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(BOX_ENV_FILE)).unwrap();
        assert!(matches!(take(dir.path()), Err(BoxEnvError::Read { .. })));
    }
}
