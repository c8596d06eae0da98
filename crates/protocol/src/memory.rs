//! A box's `/memory` as the host reads it without waking the box: the tree and its
//! entries (`GET /v1/boxes/{ref}/memory`), and the request the daemon gives its confined
//! volume reader.

use serde::{Deserialize, Serialize};

use crate::guest::FileKind;

/// The run-directory file that tells `berth-init` how to seed `/memory` on a volume's first
/// boot (a VM gets the same from its config disk). Absent: [`MemoryLayout::default`].
pub const MEMORY_LAYOUT_FILE: &str = "memory.json";

/// The most a layout file may hold (a template's `[memory]` is a few lines).
pub const MAX_LAYOUT_BYTES: u64 = 64 * 1024;

/// How `/memory` starts (a template's `[memory]`): `README.md` names whose memory it is,
/// and each folder gets a one-line `README.md` of what belongs there. Seeded on a volume's
/// first boot only; nothing there is ever overwritten.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryLayout {
    /// Whose memory this is: `/memory/README.md` says "persistent memory of [[owner]]".
    pub owner: String,
    pub folders: Vec<MemoryFolder>,
}

/// One top-level folder of `/memory`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryFolder {
    /// A plain name (no `/`).
    pub name: String,
    /// One line: what belongs in it (its `README.md`).
    pub about: String,
}

impl Default for MemoryLayout {
    /// The seed's: Instinct's `/memory` of `[[user]]` with entities, comms, timeline and
    /// workstreams.
    fn default() -> Self {
        let folder = |name: &str, about: &str| MemoryFolder {
            name: name.into(),
            about: about.into(),
        };
        MemoryLayout {
            owner: "user".into(),
            folders: vec![
                folder(
                    "entities",
                    "One file per person, project, or thing worth remembering.",
                ),
                folder("comms", "Notes on conversations and messages."),
                folder(
                    "timeline",
                    "Dated entries: what happened, what was decided.",
                ),
                folder("workstreams", "Ongoing tasks, their state and next steps."),
            ],
        }
    }
}

impl MemoryLayout {
    /// Checks what a template wrote: an owner and folder names that are plain names, at most
    /// 32 folders, every line one line.
    pub fn check(&self) -> Result<(), String> {
        if self.owner.trim().is_empty()
            || self.owner.len() > 200
            || self.owner.contains(['\n', '[', ']'])
        {
            return Err(format!(
                "owner {:?} must be one line of 1 to 200 bytes without `[` or `]`",
                self.owner
            ));
        }
        if self.folders.len() > 32 {
            return Err(format!("{} folders: at most 32", self.folders.len()));
        }
        let mut seen = std::collections::BTreeSet::new();
        for f in &self.folders {
            let plain = memory_path(&f.name)
                .is_ok_and(|p| !p.is_empty() && !p.contains('/') && p == f.name);
            if !plain || f.name == "README.md" {
                return Err(format!(
                    "folder {:?} must be a plain name (no `/`, `.` or `..`)",
                    f.name
                ));
            }
            if !seen.insert(f.name.as_str()) {
                return Err(format!("folder {:?} is named twice", f.name));
            }
            if f.about.len() > 500 || f.about.contains('\n') {
                return Err(format!(
                    "folder {:?}: its description must be one line of at most 500 bytes",
                    f.name
                ));
            }
        }
        Ok(())
    }
}

/// Where `/memory` sits in a box and in its volume image.
pub const MEMORY_ROOT: &str = "/memory";

/// Most entries one tree answer holds; a larger tree is cut there (`truncated`).
pub const MAX_TREE_ENTRIES: usize = 100_000;

/// Deepest directory a tree walks into below `/memory`.
pub const MAX_TREE_DEPTH: usize = 32;

/// Largest file a memory read answers whole.
pub const MAX_READ_BYTES: u64 = 16 << 20;

/// One entry of a box's memory.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryEntry {
    /// The path below `/memory`, `/`-separated, without a leading slash
    /// (`entities/alice.md`).
    pub path: String,
    pub kind: FileKind,
    /// Bytes (a file's length; a symlink's target length; 0 for a directory).
    pub size: u64,
    /// Modification time, seconds since the Unix epoch: absent when the memory was read
    /// from a sleeping box's volume image (the image reader does not read inode times).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified: Option<i64>,
    /// A symlink's target, as stored (never followed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// Where a memory answer was read from.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemorySource {
    /// The running box, through its agent.
    Box,
    /// The box's volume image on the host, read without waking it.
    Volume,
}

/// `GET /v1/boxes/{ref}/memory`: every entry below a directory of `/memory`, parents
/// before their children, names sorted within a directory.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryTree {
    pub source: MemorySource,
    pub entries: Vec<MemoryEntry>,
    /// The tree had more than [`MAX_TREE_ENTRIES`] entries or was deeper than
    /// [`MAX_TREE_DEPTH`]: what is here is its start.
    #[serde(default)]
    pub truncated: bool,
}

/// What the daemon asks of its confined volume reader (one request per run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum VolumeRead {
    /// The tree below `path` (relative to `/memory`; empty for all of it), as a
    /// [`MemoryTree`] in JSON on stdout.
    Tree { path: String },
    /// The bytes of the regular file at `path` on stdout, if it has at most `max_bytes`.
    File { path: String, max_bytes: u64 },
    /// All of `/memory` as a tar of its directories and regular files (names relative to
    /// it, as the agent's archive has them; symlinks left out), if its files hold at most
    /// `max_bytes`: what a snapshot of a sleeping box is taken from.
    Export { max_bytes: u64 },
}

/// Why the volume reader could not answer: the JSON it prints on stderr, exiting with
/// [`VolumeReadFailure::EXIT_CODE`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeReadFailure {
    pub kind: VolumeReadFailureKind,
    pub message: String,
}

impl VolumeReadFailure {
    /// The reader's exit code when it says why it failed (anything else is a crash).
    pub const EXIT_CODE: i32 = 3;

    /// `/memory/rel` is a symlink: a memory read never follows one.
    pub fn symlink(rel: &str) -> VolumeReadFailure {
        VolumeReadFailure {
            kind: VolumeReadFailureKind::NotARegularFile,
            message: format!("/memory/{rel} is a symlink, which memory reads never follow"),
        }
    }
}

/// `/memory` itself and each path on the way down to `rel` (a checked [`memory_path`]):
/// `""`, `"a"`, `"a/b"`: what a read checks, one step at a time, is no symlink.
pub fn steps(rel: &str) -> impl Iterator<Item = String> + '_ {
    let names = rel.split('/').filter(|n| !n.is_empty());
    std::iter::once(String::new()).chain(names.scan(String::new(), |prefix, name| {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(name);
        Some(prefix.clone())
    }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VolumeReadFailureKind {
    /// No such path in `/memory`.
    NotFound,
    /// A file was asked for and this is a directory.
    IsADirectory,
    /// A directory was asked for and this is not one.
    NotADirectory,
    /// A symlink (never followed), a device, a FIFO or a socket.
    NotARegularFile,
    /// The file is larger than the request allows.
    TooLarge,
    /// The path is not a plain relative path.
    BadPath,
    /// The image is not an ext4 file system this reader can read, or is damaged.
    Unreadable,
}

/// Checks a path below `/memory` as the API and the reader take it: relative, `/`-separated,
/// no empty, `.` or `..` component, no NUL, at most 4096 bytes and 255 per name. An empty
/// path is `/memory` itself. A leading `/memory/` or `/` is tolerated and removed.
pub fn memory_path(raw: &str) -> Result<String, &'static str> {
    let trimmed = raw
        .strip_prefix(MEMORY_ROOT)
        .filter(|rest| rest.is_empty() || rest.starts_with('/'))
        .unwrap_or(raw);
    let trimmed = trimmed.trim_start_matches('/').trim_end_matches('/');
    if trimmed.len() > 4096 {
        return Err("is longer than 4096 bytes");
    }
    if trimmed.contains('\0') {
        return Err("holds a NUL byte");
    }
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    for name in trimmed.split('/') {
        match name {
            "" => return Err("has an empty component (`//`)"),
            "." | ".." => return Err("has a `.` or `..` component"),
            n if n.len() > 255 => return Err("has a name longer than 255 bytes"),
            _ => {}
        }
    }
    Ok(trimmed.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_paths_are_plain_and_relative() {
        assert_eq!(memory_path("").unwrap(), "");
        assert_eq!(memory_path("/").unwrap(), "");
        assert_eq!(memory_path("/memory").unwrap(), "");
        assert_eq!(
            memory_path("/memory/entities/a.md").unwrap(),
            "entities/a.md"
        );
        assert_eq!(memory_path("entities/").unwrap(), "entities");
        assert_eq!(memory_path("memoryx/a").unwrap(), "memoryx/a");
        for bad in [
            "a/../b",
            "..",
            "a//b",
            "./a",
            "a/\0",
            &"x".repeat(256),
            &"a/".repeat(2100),
        ] {
            assert!(memory_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_steps_down_to_a_path_start_at_memory_itself() {
        assert_eq!(steps("").collect::<Vec<_>>(), [""]);
        assert_eq!(
            steps("a/b/c").collect::<Vec<_>>(),
            ["", "a", "a/b", "a/b/c"]
        );
    }

    #[test]
    fn a_layout_is_checked() {
        assert!(MemoryLayout::default().check().is_ok());
        let mut bad = MemoryLayout::default();
        bad.folders[0].name = "../etc".into();
        assert!(bad.check().is_err());
        let mut twice = MemoryLayout::default();
        twice.folders.push(twice.folders[0].clone());
        assert!(twice.check().unwrap_err().contains("twice"));
        let owner = MemoryLayout {
            owner: "a]]\n".into(),
            ..MemoryLayout::default()
        };
        assert!(owner.check().is_err());
    }

    #[test]
    fn a_request_and_a_failure_round_trip() {
        let r = VolumeRead::File {
            path: "a.md".into(),
            max_bytes: 7,
        };
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(json, r#"{"op":"file","path":"a.md","max_bytes":7}"#);
        assert_eq!(serde_json::from_str::<VolumeRead>(&json).unwrap(), r);
        let f: VolumeReadFailure =
            serde_json::from_str(r#"{"kind":"too_large","message":"m"}"#).unwrap();
        assert_eq!(f.kind, VolumeReadFailureKind::TooLarge);
    }
}
