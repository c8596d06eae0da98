//! berth's [`FileEntry`] as envd's `EntryInfo`.

use berth_e2b_wire::filesystem::{EntryInfo, FileType};
use berth_e2b_wire::Timestamp;
use berth_protocol::guest::{FileEntry, FileKind};

/// `entry`, found at `path`, as envd describes it. A symlink is `FILE_TYPE_SYMLINK` in `type`
/// (see `berth-e2b-wire`'s compatibility notes); a FIFO, socket or device has no type, as
/// in envd, and the SDKs leave it out of listings.
pub fn entry_info(entry: &FileEntry, path: String) -> EntryInfo {
    let file_type = match entry.kind {
        FileKind::File => FileType::File,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Other | FileKind::Unknown => FileType::Unspecified,
    };
    EntryInfo {
        name: entry.name.clone(),
        r#type: file_type as i32,
        path,
        size: i64::try_from(entry.size).unwrap_or(i64::MAX),
        mode: entry.mode & 0o777,
        permissions: permissions(entry.kind, entry.mode),
        owner: entry.owner.clone().unwrap_or_default(),
        group: entry.group.clone().unwrap_or_default(),
        modified_time: Some(Timestamp {
            seconds: entry.mtime,
            nanos: 0,
        }),
        symlink_target: entry.symlink_target.clone(),
        metadata: Default::default(),
    }
}

/// The mode as Go's `os.FileMode.String()` writes it, which is what envd sends: the type
/// and special-bit letters in Go's order (`d` directory, `L` symlink, `u` setuid, `g`
/// setgid, `t` sticky, `?` another kind), `-` when there are none, then `rwxrwxrwx`.
pub fn permissions(kind: FileKind, mode: u32) -> String {
    let mut text = String::with_capacity(12);
    match kind {
        FileKind::Dir => text.push('d'),
        FileKind::Symlink => text.push('L'),
        FileKind::File => {}
        FileKind::Other | FileKind::Unknown => {}
    }
    for (bit, letter) in [(0o4000, 'u'), (0o2000, 'g')] {
        if mode & bit != 0 {
            text.push(letter);
        }
    }
    if mode & 0o1000 != 0 {
        text.push('t');
    }
    if matches!(kind, FileKind::Other | FileKind::Unknown) {
        text.push('?');
    }
    if text.is_empty() {
        text.push('-');
    }
    for (i, letter) in "rwxrwxrwx".chars().enumerate() {
        let bit = 1 << (8 - i);
        text.push(if mode & bit != 0 { letter } else { '-' });
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_read_like_gos_file_mode() {
        assert_eq!(permissions(FileKind::File, 0o644), "-rw-r--r--");
        assert_eq!(permissions(FileKind::Dir, 0o755), "drwxr-xr-x");
        assert_eq!(permissions(FileKind::Symlink, 0o777), "Lrwxrwxrwx");
        assert_eq!(permissions(FileKind::Dir, 0o1777), "dtrwxrwxrwx");
        assert_eq!(permissions(FileKind::File, 0o4755), "urwxr-xr-x");
        assert_eq!(permissions(FileKind::File, 0o2000), "g---------");
        assert_eq!(permissions(FileKind::Other, 0o600), "?rw-------");
    }
}
