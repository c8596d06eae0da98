//! Writing a backup's archive in one pass (`format.rs`): each entry hashed as it goes
//! out, the manifest of them last. Blocking: run it on a thread of its own.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::error::BackupError;
use super::format::{
    BoxSpec, Header, Manifest, ManifestEntry, VolumeMap, BLOBS, HEADER, MANIFEST, RECORDS, SPEC,
    TREES, VOLUME_DATA, VOLUME_MAP,
};
use super::hashing::Hashing;
use berth_chunks::memory::HistoryExport;

/// zstd's default level: `tar | zstd` as a person would run it.
const ZSTD_LEVEL: i32 = 3;
const READ_CHUNK: usize = 1 << 20;

/// What goes into one archive.
pub struct Source {
    pub header: Header,
    pub spec: BoxSpec,
    /// The staged image and its map; `None`: the box has no volume yet.
    pub volume: Option<(File, VolumeMap)>,
    pub history: HistoryExport,
}

/// zstd's worker threads: one per core, up to 4 (a backup must not take the host).
fn compress_threads() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4) as u32)
}

/// What an archive written holds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Written {
    pub volume_bytes: u64,
    pub snapshots: u64,
    pub history_bytes: u64,
}

/// Writes `source` as an archive to `out`; `runtime` reads the history's objects.
pub fn write(
    mut source: Source,
    out: impl Write,
    runtime: &tokio::runtime::Handle,
) -> Result<(Written, HistoryExport), BackupError> {
    let gone = |e: io::Error| io_error(e, "write the backup");
    let mut encoder = zstd::Encoder::new(out, ZSTD_LEVEL).map_err(gone)?;
    encoder.include_checksum(true).map_err(gone)?;
    // Compression on threads of its own, so it overlaps the reading and hashing here.
    encoder.multithread(compress_threads()).map_err(gone)?;
    let mut tar = Entries {
        builder: tar::Builder::new(encoder),
        manifest: Vec::new(),
        mtime: crate::durable::unix_now(),
    };
    tar.json(HEADER, &source.header)?;
    tar.json(SPEC, &source.spec)?;
    let mut written = Written::default();
    if let Some((image, map)) = &source.volume {
        tar.json(VOLUME_MAP, map)?;
        written.volume_bytes = map.data_bytes();
        let data = Extents {
            file: image,
            extents: &map.extents,
            next: 0,
            at: 0,
        };
        tar.append(VOLUME_DATA, written.volume_bytes, data)?;
    }
    let history = &mut source.history;
    written.snapshots = history.records.len() as u64;
    tar.json(RECORDS, &history.records)?;
    for (hash, json) in &history.trees {
        tar.append(&format!("{TREES}{hash}"), json.len() as u64, &json[..])?;
        written.history_bytes += json.len() as u64;
    }
    let blobs: Vec<(String, u64)> = history.blobs.iter().map(|(h, s)| (h.clone(), *s)).collect();
    for (hash, size) in blobs {
        let bytes = runtime.block_on(history.blob(&hash, size))?;
        tar.append(&format!("{BLOBS}{hash}"), size, &bytes[..])?;
        written.history_bytes += size;
    }
    let manifest = Manifest {
        entries: std::mem::take(&mut tar.manifest),
    };
    tar.json(MANIFEST, &manifest)?;
    let encoder = tar.builder.into_inner().map_err(gone)?;
    encoder.finish().map_err(gone)?.flush().map_err(gone)?;
    Ok((written, source.history))
}

/// The tar being written, and the manifest of what it holds so far.
struct Entries<W: Write> {
    builder: tar::Builder<W>,
    manifest: Vec<ManifestEntry>,
    mtime: u64,
}

impl<W: Write> Entries<W> {
    fn json(&mut self, name: &str, value: &impl serde::Serialize) -> Result<(), BackupError> {
        let json = serde_json::to_vec_pretty(value).expect("backup entries serialize");
        self.append(name, json.len() as u64, &json[..])
    }

    fn append(&mut self, name: &str, size: u64, data: impl Read) -> Result<(), BackupError> {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(size);
        header.set_mode(0o600);
        header.set_mtime(self.mtime);
        let mut hashing = Hashing::new(data);
        self.builder
            .append_data(&mut header, name, &mut hashing)
            .map_err(|e| io_error(e, "write the backup"))?;
        if hashing.read_bytes() != size {
            return Err(BackupError::Io {
                action: "read the box's data for",
                path: name.into(),
                source: io::Error::new(io::ErrorKind::UnexpectedEof, "it changed while read"),
            });
        }
        self.manifest.push(ManifestEntry {
            path: name.to_owned(),
            size,
            sha256: hashing.sha256(),
        });
        Ok(())
    }
}

/// A client that stops reading shows up as a broken pipe on the stream.
fn io_error(e: io::Error, action: &'static str) -> BackupError {
    if e.kind() == io::ErrorKind::BrokenPipe {
        return BackupError::ClientGone;
    }
    BackupError::Io {
        action,
        path: "the archive".into(),
        source: e,
    }
}

/// The data extents of an image, read one after another.
struct Extents<'a> {
    file: &'a File,
    extents: &'a [(u64, u64)],
    next: usize,
    /// How far into extent `next`.
    at: u64,
}

impl Read for Extents<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(&(offset, len)) = self.extents.get(self.next) else {
            return Ok(0);
        };
        let want = (len - self.at).min(buf.len().min(READ_CHUNK) as u64) as usize;
        let n = self.file.read_at(&mut buf[..want], offset + self.at)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the staged image ended before its map",
            ));
        }
        self.at += n as u64;
        if self.at == len {
            self.next += 1;
            self.at = 0;
        }
        Ok(n)
    }
}

/// The map of the staged image `image`.
pub fn volume_map(image: &File, path: &Path) -> Result<VolumeMap, BackupError> {
    let size = image
        .metadata()
        .map_err(BackupError::io("read the length of", path))?
        .len();
    let extents = crate::durable::stage::data_extents(image)
        .map_err(BackupError::io("find the data of", path))?;
    Ok(VolumeMap { size, extents })
}
