//! berth's watch events as envd's `FilesystemEvent`s. Names are relative to the watched
//! directory, as envd's. A rename inside the tree is `RENAME` of the old name then `CREATE`
//! of the new one (what inotify, and so envd, reports); berth's `overflow` has no envd
//! counterpart and is dropped (logged).

use berth_e2b_wire::filesystem::{EventType, FilesystemEvent};
use berth_protocol::files::WatchEvent;

/// What `event` is in envd's terms: none, one or two events. `None` when the watch ends
/// (the watched directory went away).
pub fn filesystem_events(event: WatchEvent) -> Option<Vec<FilesystemEvent>> {
    let one = |name: String, kind: EventType| FilesystemEvent {
        name,
        r#type: kind as i32,
        entry: None,
    };
    let events = match event {
        WatchEvent::Create { path, .. } => vec![one(path, EventType::Create)],
        WatchEvent::Modify { path, .. } => vec![one(path, EventType::Write)],
        WatchEvent::Delete { path, .. } => vec![one(path, EventType::Remove)],
        WatchEvent::Rename { from, to, .. } => {
            vec![one(from, EventType::Rename), one(to, EventType::Create)]
        }
        WatchEvent::Overflow => {
            tracing::debug!("envd watch: the box dropped events (overflow)");
            Vec::new()
        }
        WatchEvent::Unknown => Vec::new(),
        WatchEvent::Gone => return None,
    };
    Some(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rename_is_rename_then_create() {
        let events = filesystem_events(WatchEvent::Rename {
            from: "a".into(),
            to: "b".into(),
            dir: false,
        })
        .unwrap();
        let got: Vec<_> = events.iter().map(|e| (e.name.as_str(), e.r#type)).collect();
        assert_eq!(
            got,
            [
                ("a", EventType::Rename as i32),
                ("b", EventType::Create as i32)
            ]
        );
        assert!(filesystem_events(WatchEvent::Gone).is_none());
        assert!(filesystem_events(WatchEvent::Overflow).unwrap().is_empty());
    }
}
