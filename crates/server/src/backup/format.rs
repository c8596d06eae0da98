//! A box's backup as a file: a tar stream, zstd-compressed with zstd's own checksum of
//! the whole, whose entries come in this order and no other:
//!
//! ```text
//! berth-backup.json        Header: the format, the box, and how much the rest holds
//! box.json                 BoxSpec: what the box is made of (template, limits, sleep, …)
//! volume/map.json          VolumeMap: the image's size and where it holds data
//! volume/data              those data extents, one after another (holes are not stored)
//! memory/snapshots.json    the memory history's snapshot records, oldest first
//! memory/trees/<sha256>    each directory of each snapshot, once
//! memory/blobs/<sha256>    each file of each snapshot, once
//! manifest.json            Manifest: every entry above, its size and sha256
//! ```
//!
//! The volume entries are absent for a box that never started. The manifest comes last so
//! the archive is written in one pass; a restore checks every entry against it, so an
//! archive cut short (no manifest), changed (a hash differs) or added to (an entry the
//! manifest does not name) is refused. The manifest is not a signature: a restore takes
//! everything in it as a client's input, as it would a create request and a VM guest's
//! disk.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const FORMAT: &str = "berth-backup";
/// The archive layout this berth writes, and the newest it reads.
pub const VERSION: u32 = 1;

pub const HEADER: &str = "berth-backup.json";
pub const SPEC: &str = "box.json";
pub const VOLUME_MAP: &str = "volume/map.json";
pub const VOLUME_DATA: &str = "volume/data";
pub const RECORDS: &str = "memory/snapshots.json";
pub const TREES: &str = "memory/trees/";
pub const BLOBS: &str = "memory/blobs/";
pub const MANIFEST: &str = "manifest.json";

/// The first entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u32,
    pub created_at: String,
    pub berth_version: String,
    pub box_id: String,
    pub box_name: String,
    /// The tenant's name.
    pub tenant: String,
    /// The volume image's length (0: the box has no volume yet).
    pub volume_size: u64,
    /// The bytes of `volume/data`.
    pub volume_bytes: u64,
    /// The bytes of every memory tree and blob.
    pub history_bytes: u64,
}

/// What the box is made of, as its row holds it: a restore creates a box from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoxSpec {
    pub name: String,
    pub template: String,
    pub runtime: String,
    pub memory_mib: u64,
    pub pids: u64,
    pub cpus: f64,
    pub pause_after_s: u64,
    pub snapshot_after_s: u64,
    pub stop_after_s: u64,
    pub auto_resume: bool,
    /// The box's own egress policy; absent: its template's.
    #[serde(default)]
    pub egress: Option<serde_json::Value>,
    #[serde(default)]
    pub disk_mib: Option<u64>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// Where the image holds data: `(offset, length)` in order, not overlapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeMap {
    pub size: u64,
    pub extents: Vec<(u64, u64)>,
}

impl VolumeMap {
    /// Why the map cannot be an image's, if it cannot.
    pub fn problem(&self) -> Option<&'static str> {
        let mut end = 0u64;
        for &(offset, len) in &self.extents {
            if len == 0 {
                return Some("an extent is empty");
            }
            if offset < end {
                return Some("its extents overlap or are out of order");
            }
            end = match offset.checked_add(len) {
                Some(end) if end <= self.size => end,
                _ => return Some("an extent ends past the image"),
            };
        }
        None
    }

    pub fn data_bytes(&self) -> u64 {
        self.extents.iter().map(|&(_, len)| len).sum()
    }
}

/// The last entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub entries: Vec<ManifestEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestEntry {
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

/// An entry's name, as the archive may hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Header,
    Spec,
    VolumeMap,
    VolumeData,
    Records,
    Tree(String),
    Blob(String),
    Manifest,
}

impl Entry {
    /// The entry `name` is, if a backup may hold it: names are matched whole, so no `..`,
    /// absolute or other path is ever one.
    pub fn parse(name: &str) -> Option<Entry> {
        let hash = |prefix: &str| {
            name.strip_prefix(prefix)
                .filter(|h| {
                    h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                })
                .map(str::to_owned)
        };
        Some(match name {
            HEADER => Entry::Header,
            SPEC => Entry::Spec,
            VOLUME_MAP => Entry::VolumeMap,
            VOLUME_DATA => Entry::VolumeData,
            RECORDS => Entry::Records,
            MANIFEST => Entry::Manifest,
            _ => {
                if let Some(h) = hash(TREES) {
                    Entry::Tree(h)
                } else {
                    Entry::Blob(hash(BLOBS)?)
                }
            }
        })
    }

    /// Where the entry comes in the archive: ranks never go down.
    pub fn rank(&self) -> u8 {
        match self {
            Entry::Header => 0,
            Entry::Spec => 1,
            Entry::VolumeMap => 2,
            Entry::VolumeData => 3,
            Entry::Records => 4,
            Entry::Tree(_) => 5,
            Entry::Blob(_) => 6,
            Entry::Manifest => 7,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_names_of_a_backup_are_entries() {
        let hash = "ab".repeat(32);
        assert_eq!(Entry::parse("box.json"), Some(Entry::Spec));
        assert_eq!(
            Entry::parse(&format!("memory/blobs/{hash}")),
            Some(Entry::Blob(hash.clone()))
        );
        for bad in [
            "../box.json",
            "./box.json",
            "/box.json",
            "memory/blobs/../../etc",
            &format!("memory/blobs/{}", "AB".repeat(32)),
            &format!("memory/trees/{hash}/x"),
            "volume",
            "",
        ] {
            assert_eq!(Entry::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_map_must_fit_its_image() {
        let map = |size, extents: &[(u64, u64)]| VolumeMap {
            size,
            extents: extents.to_vec(),
        };
        assert_eq!(map(100, &[(0, 10), (20, 80)]).problem(), None);
        assert!(map(100, &[(0, 10), (5, 10)]).problem().is_some());
        assert!(map(100, &[(90, 20)]).problem().is_some());
        assert!(map(100, &[(u64::MAX, 2)]).problem().is_some());
        assert!(map(100, &[(10, 0)]).problem().is_some());
    }
}
