//! Whole directories as tar streams, and file watching (protocol version 3).
//!
//! | call | method and path | request | response |
//! |---|---|---|---|
//! | [`crate::guest::Call::FileArchiveRead`] | `GET /v1/files/archive?path=&user=` | - | a tar stream (`application/x-tar`) |
//! | [`crate::guest::Call::FileArchiveWrite`] | `PUT /v1/files/archive?path=&user=` | a tar stream | [`ArchiveWritten`] |
//! | [`crate::guest::Call::FileWatch`] | `GET /v1/files/watch?path=&recursive=&user=` | - | NDJSON of [`WatchEvent`], an empty keepalive line every 10 s |
//!
//! The queries are [`crate::guest::FileQuery`]'s. An archive's entry names are relative to
//! the directory named by `path` (its contents, no `./` prefix); a `path` that names a
//! single file gives one entry, named by the file's own name. Symlinks are entries of
//! their own (never followed); sockets, FIFOs and devices are left out.

use serde::{Deserialize, Serialize};

/// How many watch events `berth-init` holds for a reader that is slower than the
/// filesystem; past it, events are dropped and a [`WatchEvent::Overflow`] says so.
pub const WATCH_QUEUE_EVENTS: usize = 4096;

/// What an archive extraction wrote.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveWritten {
    /// Regular files written.
    #[serde(default)]
    pub files: u64,
    /// Directories made (or found already there).
    #[serde(default)]
    pub dirs: u64,
    /// Symbolic and hard links made.
    #[serde(default)]
    pub links: u64,
    /// Bytes of file content written.
    #[serde(default)]
    pub bytes: u64,
}

/// One change seen by a watch. Paths are relative to the watched directory (`""` is the
/// directory itself). A rename inside the watched tree is one `rename`; a move out of it is
/// a `delete`, a move into it a `create`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WatchEvent {
    Create {
        path: String,
        #[serde(default)]
        dir: bool,
    },
    Modify {
        path: String,
        #[serde(default)]
        dir: bool,
    },
    Delete {
        path: String,
        #[serde(default)]
        dir: bool,
    },
    Rename {
        from: String,
        to: String,
        #[serde(default)]
        dir: bool,
    },
    /// Events were dropped (the reader was slower than the filesystem, or the kernel's
    /// own queue overflowed): rescan what matters.
    Overflow,
    /// The watched directory itself was removed or moved away: the stream ends after this.
    Gone,
    /// An event type from a newer peer.
    #[serde(other)]
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Version 3's files schema, frozen: changing a shape here breaks old peers.
    #[test]
    fn version_3_files_schema_is_frozen() {
        let events = [
            (
                WatchEvent::Create {
                    path: "a/b".into(),
                    dir: false,
                },
                json!({"type":"create","path":"a/b","dir":false}),
            ),
            (
                WatchEvent::Modify {
                    path: "f".into(),
                    dir: false,
                },
                json!({"type":"modify","path":"f","dir":false}),
            ),
            (
                WatchEvent::Delete {
                    path: "d".into(),
                    dir: true,
                },
                json!({"type":"delete","path":"d","dir":true}),
            ),
            (
                WatchEvent::Rename {
                    from: "x".into(),
                    to: "y".into(),
                    dir: false,
                },
                json!({"type":"rename","from":"x","to":"y","dir":false}),
            ),
            (WatchEvent::Overflow, json!({"type":"overflow"})),
            (WatchEvent::Gone, json!({"type":"gone"})),
        ];
        for (event, expected) in events {
            assert_eq!(serde_json::to_value(&event).unwrap(), expected);
            assert_eq!(
                serde_json::from_value::<WatchEvent>(expected).unwrap(),
                event
            );
        }
        let written = ArchiveWritten {
            files: 3,
            dirs: 2,
            links: 1,
            bytes: 10,
        };
        assert_eq!(
            serde_json::to_value(written).unwrap(),
            json!({"files":3,"dirs":2,"links":1,"bytes":10})
        );
    }

    #[test]
    fn lenient_inside() {
        let event: WatchEvent =
            serde_json::from_value(json!({"type":"attrib","path":"a"})).unwrap();
        assert_eq!(event, WatchEvent::Unknown);
        let event: WatchEvent =
            serde_json::from_value(json!({"type":"create","path":"a","new":1})).unwrap();
        assert_eq!(
            event,
            WatchEvent::Create {
                path: "a".into(),
                dir: false
            }
        );
        let written: ArchiveWritten = serde_json::from_value(json!({"files":1})).unwrap();
        assert_eq!(written.files, 1);
    }
}
