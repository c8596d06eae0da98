//! Reading an archive into a directory of its own, checked whole before anything is made
//! of it: only the entries a backup holds, in their order, each within its bound, each
//! matching the manifest, the manifest last, and zstd's checksum of the whole. Blocking:
//! run it on a thread of its own.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::error::BackupError;
use super::format::{BoxSpec, Entry, Header, Manifest, ManifestEntry, VolumeMap, FORMAT, VERSION};
use super::hashing::Hashing;
use berth_chunks::memory::{check_import, HistoryImport, BLOBS_DIR, MAX_SNAPSHOT_BYTES, TREES_DIR};
use berth_protocol::memory_history::MemorySnapshot;

/// The largest JSON entry read (a volume map of a badly fragmented image is the largest).
const MAX_JSON_BYTES: u64 = 64 << 20;
/// The largest tree object (as the chunk store reads them back).
const MAX_TREE_BYTES: u64 = 64 << 20;
/// The most bytes after the tar's end (zstd's frame end and tar's padding).
const MAX_TRAILER_BYTES: u64 = 1 << 20;
const COPY_CHUNK: usize = 1 << 20;

/// A check of an archive's header and spec before its bulk is read.
pub type EarlyCheck = Box<dyn Fn(&Header, &BoxSpec) -> Result<(), BackupError> + Send>;

/// What a restore may take.
pub struct Bounds {
    /// The largest volume image.
    pub max_volume: u64,
    /// Called with the header and the box's spec, before any large entry is read: refuses
    /// early what the restore would refuse at its end (no room on the host, a name taken).
    pub early: EarlyCheck,
}

/// An archive read whole and checked, in `dir`.
#[derive(Debug)]
pub struct Received {
    pub header: Header,
    pub spec: BoxSpec,
    /// The image, sparse as it was; `None`: the box had no volume.
    pub volume: Option<PathBuf>,
    pub history: HistoryImport,
}

/// The file the volume is written to, in `dir`.
const VOLUME_FILE: &str = "volume.ext4";
const MEMORY_DIR: &str = "memory";

/// Reads the archive from `input` into `dir` (which must exist, empty).
pub fn receive(input: impl Read, dir: &Path, bounds: &Bounds) -> Result<Received, BackupError> {
    let decoder = zstd::Decoder::new(input).map_err(damaged)?;
    let mut archive = tar::Archive::new(decoder);
    let mut state = State::default();
    for entry in archive.entries().map_err(damaged)? {
        let mut entry = entry.map_err(damaged)?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        if state.manifest.is_some() {
            return Err(BackupError::invalid(format!(
                "{name:?} comes after the manifest, which ends a backup"
            )));
        }
        let kind = Entry::parse(&name).ok_or_else(|| {
            BackupError::invalid(format!("it holds {name:?}, which no berth backup holds"))
        })?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err(BackupError::invalid(format!(
                "{name:?} is not a plain file"
            )));
        }
        state.order(&kind, &name)?;
        let size = entry.size();
        let mut hashing = Hashing::new(&mut entry);
        state.take(&kind, &name, size, &mut hashing, dir, bounds)?;
        if hashing.read_bytes() != size {
            return Err(damaged(io::ErrorKind::UnexpectedEof.into()));
        }
        let sha256 = hashing.sha256();
        if kind == Entry::Manifest {
            continue; // not in itself
        }
        state.seen.push(ManifestEntry {
            path: name,
            size,
            sha256,
        });
    }
    // The rest of the stream: zstd checks its checksum of the whole at its end.
    let mut rest = archive.into_inner().take(MAX_TRAILER_BYTES + 1);
    let trailer = io::copy(&mut rest, &mut io::sink()).map_err(damaged)?;
    if trailer > MAX_TRAILER_BYTES {
        return Err(BackupError::invalid("data follows the end of the tar"));
    }
    state.finish(dir)
}

#[derive(Default)]
struct State {
    rank: Option<u8>,
    header: Option<Header>,
    spec: Option<BoxSpec>,
    map: Option<VolumeMap>,
    volume: Option<PathBuf>,
    records: Option<Vec<MemorySnapshot>>,
    objects: BTreeSet<String>,
    /// What the header said the history's objects hold, less what came so far.
    history_left: u64,
    manifest: Option<Manifest>,
    seen: Vec<ManifestEntry>,
}

impl State {
    /// Entries come in their order, the header first, each single one once.
    fn order(&mut self, kind: &Entry, name: &str) -> Result<(), BackupError> {
        let rank = kind.rank();
        match self.rank {
            None if *kind != Entry::Header => {
                return Err(BackupError::invalid(
                    "it does not begin with berth-backup.json: it is not a berth backup",
                ))
            }
            Some(last) if rank < last => {
                return Err(BackupError::invalid(format!(
                    "{name:?} is out of its order"
                )))
            }
            Some(last) if rank == last && !matches!(kind, Entry::Tree(_) | Entry::Blob(_)) => {
                return Err(BackupError::invalid(format!("{name:?} is there twice")))
            }
            _ => {}
        }
        if *kind == Entry::VolumeData && self.map.is_none() {
            return Err(BackupError::invalid(
                "volume/data comes without volume/map.json",
            ));
        }
        if matches!(kind, Entry::Tree(_) | Entry::Blob(_)) && !self.objects.insert(name.to_owned())
        {
            return Err(BackupError::invalid(format!("{name:?} is there twice")));
        }
        self.rank = Some(rank);
        Ok(())
    }

    fn take(
        &mut self,
        kind: &Entry,
        name: &str,
        size: u64,
        data: &mut impl Read,
        dir: &Path,
        bounds: &Bounds,
    ) -> Result<(), BackupError> {
        match kind {
            Entry::Header => {
                let header: Header = json(name, size, data)?;
                if header.format != FORMAT {
                    return Err(BackupError::invalid("it is not a berth backup"));
                }
                if header.version > VERSION {
                    return Err(BackupError::invalid(format!(
                        "it was made by a newer berth (format {}; this one reads up to {VERSION}): restore it with that version",
                        header.version
                    )));
                }
                if header.volume_size > bounds.max_volume {
                    return Err(BackupError::TooLarge {
                        what: "its volume",
                        size: header.volume_size,
                        max: bounds.max_volume,
                    });
                }
                self.history_left = header.history_bytes;
                self.header = Some(header);
            }
            Entry::Spec => {
                let spec: BoxSpec = json(name, size, data)?;
                let header = self.header.as_ref().expect("the header came first");
                (bounds.early)(header, &spec)?;
                self.spec = Some(spec);
            }
            Entry::VolumeMap => {
                let map: VolumeMap = json(name, size, data)?;
                let header = self.header.as_ref().expect("the header came first");
                if map.size == 0 {
                    return Err(BackupError::invalid("volume/map.json names an empty image"));
                }
                if let Some(problem) = map.problem() {
                    return Err(BackupError::invalid(format!("volume/map.json: {problem}")));
                }
                if map.size != header.volume_size || map.data_bytes() != header.volume_bytes {
                    return Err(BackupError::invalid(
                        "volume/map.json does not match the header",
                    ));
                }
                self.map = Some(map);
            }
            Entry::VolumeData => {
                let map = self.map.as_ref().expect("checked in order()");
                if size != map.data_bytes() {
                    return Err(BackupError::invalid(
                        "volume/data is not as long as its map says",
                    ));
                }
                let path = dir.join(VOLUME_FILE);
                write_volume(&path, map, data)?;
                self.volume = Some(path);
            }
            Entry::Records => self.records = Some(json(name, size, data)?),
            Entry::Tree(hash) => {
                self.history_bytes(size)?;
                object(
                    &dir.join(MEMORY_DIR).join(TREES_DIR),
                    hash,
                    size,
                    MAX_TREE_BYTES,
                    data,
                )?
            }
            Entry::Blob(hash) => {
                self.history_bytes(size)?;
                object(
                    &dir.join(MEMORY_DIR).join(BLOBS_DIR),
                    hash,
                    size,
                    MAX_SNAPSHOT_BYTES,
                    data,
                )?
            }
            Entry::Manifest => self.manifest = Some(json(name, size, data)?),
        }
        Ok(())
    }

    /// The history's objects stay within what the header promised (it was checked for
    /// room).
    fn history_bytes(&mut self, size: u64) -> Result<(), BackupError> {
        self.history_left = self.history_left.checked_sub(size).ok_or_else(|| {
            BackupError::invalid("its memory history is larger than its header says")
        })?;
        Ok(())
    }

    fn finish(self, dir: &Path) -> Result<Received, BackupError> {
        let manifest = self.manifest.ok_or_else(|| {
            BackupError::invalid(
                "it ends before its manifest: it was cut short; make the backup again",
            )
        })?;
        if manifest.entries != self.seen {
            let differs = manifest
                .entries
                .iter()
                .zip(&self.seen)
                .find(|(a, b)| a != b)
                .map(|(a, _)| a.path.clone());
            return Err(BackupError::invalid(match differs {
                Some(path) => {
                    format!("{path} does not match the manifest: the archive was changed")
                }
                None => "its entries are not the ones its manifest lists".to_owned(),
            }));
        }
        let header = self.header.expect("the manifest came after the header");
        let spec = self
            .spec
            .ok_or_else(|| BackupError::invalid("it holds no box.json"))?;
        if header.volume_size > 0 && self.volume.is_none() {
            return Err(BackupError::invalid(
                "its header names a volume it does not hold",
            ));
        }
        let records = self
            .records
            .ok_or_else(|| BackupError::invalid("it holds no memory/snapshots.json"))?;
        let history = check_import(&dir.join(MEMORY_DIR), records)?;
        Ok(Received {
            header,
            spec,
            volume: self.volume,
            history,
        })
    }
}

/// A read of the archive that failed: zstd's checksum, a cut, a broken tar.
fn damaged(e: io::Error) -> BackupError {
    BackupError::invalid(format!(
        "the archive is damaged or cut short ({e}); make the backup again"
    ))
}

fn json<T: serde::de::DeserializeOwned>(
    name: &str,
    size: u64,
    data: &mut impl Read,
) -> Result<T, BackupError> {
    if size > MAX_JSON_BYTES {
        return Err(BackupError::TooLarge {
            what: "a JSON entry",
            size,
            max: MAX_JSON_BYTES,
        });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    data.take(size)
        .read_to_end(&mut bytes)
        .map_err(|e| BackupError::invalid(format!("{name} cannot be read ({e})")))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| BackupError::invalid(format!("{name} is not what a backup holds there ({e})")))
}

/// Writes the volume's data at its map's offsets into a new sparse file of its size.
fn write_volume(path: &Path, map: &VolumeMap, data: &mut impl Read) -> Result<(), BackupError> {
    let file = create(path)?;
    file.set_len(map.size)
        .map_err(BackupError::io("size the restored volume", path))?;
    let mut buf = vec![0u8; COPY_CHUNK];
    for &(offset, len) in &map.extents {
        let mut done = 0u64;
        while done < len {
            let want = (len - done).min(COPY_CHUNK as u64) as usize;
            data.read_exact(&mut buf[..want]).map_err(damaged)?;
            file.write_all_at(&buf[..want], offset + done)
                .map_err(BackupError::io("write the restored volume", path))?;
            done += want as u64;
        }
    }
    file.sync_all()
        .map_err(BackupError::io("sync the restored volume", path))
}

fn object(
    dir: &Path,
    hash: &str,
    size: u64,
    max: u64,
    data: &mut impl Read,
) -> Result<(), BackupError> {
    if size > max {
        return Err(BackupError::TooLarge {
            what: "a memory object",
            size,
            max,
        });
    }
    std::fs::create_dir_all(dir).map_err(BackupError::io("create", dir))?;
    let path = dir.join(hash);
    let mut file = create(&path)?;
    io::copy(&mut data.take(size), &mut file)
        .map_err(|e| BackupError::invalid(format!("the archive is damaged or cut short ({e})")))?;
    file.flush().map_err(BackupError::io("write", &path))
}

fn create(path: &Path) -> Result<File, BackupError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(BackupError::io("create", path))
}
