//! `berth cp -r`: a directory into or out of a box, as one tar stream each way.
//!
//! Both directions stream: the tar is built (or extracted) on a blocking thread that
//! meets the HTTP body through tokio-util's bridges (a pipe of one chunk each way), so
//! memory stays small whatever the tree's size. Progress (bytes so far) goes to stderr every half second when stderr
//! is a terminal; a summary line ends every copy.

use std::future::ready;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use anyhow::{bail, Context as _};
use berth_protocol::files::ArchiveWritten;
use futures_util::{StreamExt as _, TryStreamExt as _};
use http::Method;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::sync::oneshot;
use tokio_util::io::{ReaderStream, StreamReader, SyncIoBridge};

use crate::args::box_path;
use crate::client::{query_value, Client};
use crate::progress::{human, Progress};
use crate::tar_bounds::BoundedTar;

const CHUNK_BYTES: usize = 256 * 1024;

/// Uploads the directory `local` as a tar, extracted into `path` in box `name`.
pub async fn upload(
    client: &Client,
    local: &Path,
    name: &str,
    path: &str,
    user: &str,
) -> anyhow::Result<()> {
    let meta =
        std::fs::metadata(local).with_context(|| format!("cannot open {}", local.display()))?;
    if !meta.is_dir() {
        bail!(
            "{} is not a directory (without -r, berth cp copies one file)",
            local.display()
        );
    }
    let progress = Progress::start(format!("{} -> {name}:{path}", local.display()));
    // A duplex end, unlike a split simplex half, ends the stream when it is dropped.
    let (tar_in, tar_out) = tokio::io::duplex(CHUNK_BYTES);
    // A pack that fails is told to the body after the bytes it made, so the request is
    // cut: the daemon never takes a tar that stops between entries for a whole one.
    let (failed_tx, failed_rx) = oneshot::channel::<io::Error>();
    let out = SyncIoBridge::new(tar_out);
    let root = local.to_path_buf();
    let packer = tokio::task::spawn_blocking(move || {
        let packed = pack(&root, BufWriter::with_capacity(CHUNK_BYTES, out));
        if let Err(err) = &packed {
            let _ = failed_tx.send(io::Error::new(err.kind(), err.to_string()));
        }
        packed
    });
    let counted = progress.bytes.clone();
    let failure =
        futures_util::stream::once(failed_rx).filter_map(|failed| ready(failed.ok().map(Err)));
    let tar = ReaderStream::with_capacity(tar_in, CHUNK_BYTES)
        .inspect_ok(move |chunk| {
            counted.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        })
        .chain(failure);
    let body = BodyExt::boxed(StreamBody::new(tar.map_ok(Frame::data)));
    let query = format!("?path={}&user={user}", query_value(path));
    let sent = client
        .send(
            Method::PUT,
            &format!("{}{query}", box_path(name, "/files/archive")),
            "application/json",
            Some("application/x-tar"),
            None,
            body,
        )
        .await;
    // A local failure (an unreadable file) is the cause; the daemon's answer to the cut
    // body only repeats it.
    if let Ok(Err(err)) = packer.await {
        return Err(err).with_context(|| format!("cannot read {}", local.display()));
    }
    let response = sent?;
    let answer = response
        .into_body()
        .collect()
        .await
        .context("reading the daemon's answer")?
        .to_bytes();
    let written: ArchiveWritten =
        serde_json::from_slice(&answer).context("decoding the daemon's answer")?;
    progress.finish(&format!(
        "copied {} files, {} dirs, {} links, {} to {name}:{path}",
        written.files,
        written.dirs,
        written.links,
        human(written.bytes)
    ));
    Ok(())
}

/// The local tree as a tar: names relative to it, symlinks stored as links (never
/// followed), sockets, FIFOs and devices left out. A file that changes size while it is
/// read is cut or zero-padded to the size in its header, so the tar stays valid.
fn pack(root: &Path, out: impl Write) -> io::Result<()> {
    let mut builder = tar::Builder::new(out);
    let mut stack = vec![(root.to_path_buf(), PathBuf::new())];
    while let Some((dir, rel)) = stack.pop() {
        for item in std::fs::read_dir(&dir)? {
            let item = item?;
            let (path, name) = (item.path(), rel.join(item.file_name()));
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                // Removed since it was listed.
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(err),
            };
            let mut header = tar::Header::new_gnu();
            header.set_metadata_in_mode(&meta, tar::HeaderMode::Complete);
            let kind = meta.file_type();
            if kind.is_dir() {
                builder.append_data(&mut header, &name, io::empty())?;
                stack.push((path, name));
            } else if kind.is_symlink() {
                let target = std::fs::read_link(&path)?;
                builder.append_link(&mut header, &name, target)?;
            } else if kind.is_file() {
                use std::os::unix::fs::OpenOptionsExt as _;
                // O_NOFOLLOW|O_NONBLOCK: what replaced the file since its stat (a link,
                // a FIFO) is neither followed nor waited on.
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                    .open(&path)?;
                let size = meta.len();
                let data = file.take(size).chain(io::repeat(0)).take(size);
                builder.append_data(&mut header, &name, data)?;
            }
        }
    }
    builder.into_inner()?.flush()
}

/// Downloads the tar of `path` in box `name` and extracts it into `local` (made if
/// missing). The box is not trusted: entries that would land outside `local` are refused
/// by the extraction (`tar`'s `unpack_in`), and setuid/setgid bits are dropped.
pub async fn download(
    client: &Client,
    name: &str,
    path: &str,
    local: &Path,
    user: &str,
) -> anyhow::Result<()> {
    let query = format!("?path={}&user={user}", query_value(path));
    let response = client
        .send(
            Method::GET,
            &format!("{}{query}", box_path(name, "/files/archive")),
            "application/x-tar",
            None,
            None,
            crate::client::empty(),
        )
        .await?;
    std::fs::create_dir_all(local).with_context(|| format!("cannot create {}", local.display()))?;
    let progress = Progress::start(format!("{name}:{path} -> {}", local.display()));
    let counted = progress.bytes.clone();
    let tar = response
        .into_body()
        .into_data_stream()
        .inspect_ok(move |chunk| {
            counted.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        })
        .map_err(|err| io::Error::other(format!("the box's archive stream broke off: {err}")));
    let input = SyncIoBridge::new(StreamReader::new(tar));
    let dest = local.to_path_buf();
    let unpacker = tokio::task::spawn_blocking(move || unpack(&dest, input));
    let unpacked = unpacker.await.context("the extraction stopped")?;
    unpacked.with_context(|| format!("extracting into {}", local.display()))?;
    let bytes = progress.bytes.load(Ordering::Relaxed);
    progress.finish(&format!(
        "copied {name}:{path} ({} of tar) to {}",
        human(bytes),
        local.display()
    ));
    Ok(())
}

/// Extracts the tar into `dest` with `tar`'s own checks (an entry that would land outside
/// `dest`, directly or through a symlink, is an error) and [`BoundedTar`]'s (no record
/// the reader would hold whole is over its bound); directories get their modes last, so a
/// read-only one still receives its contents.
fn unpack(dest: &Path, input: impl Read) -> io::Result<()> {
    let mut archive = tar::Archive::new(BoundedTar::new(input));
    archive.set_preserve_permissions(false);
    archive.set_preserve_mtime(true);
    archive.set_overwrite(true);
    archive.unpack(dest)
}

/// The local directory a download lands in: `local` itself, or `local/<name of the box
/// directory>` when `local` is an existing directory or ends in '/'.
pub fn download_target(local: &Path, box_path: &str) -> PathBuf {
    let into = local.is_dir() || local.as_os_str().to_string_lossy().ends_with('/');
    let base = box_path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("");
    if into && !base.is_empty() {
        local.join(base)
    } else {
        local.to_path_buf()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(root: &Path) -> Vec<u8> {
        let mut bytes = Vec::new();
        pack(root, &mut bytes).unwrap();
        bytes
    }

    #[test]
    fn a_local_tree_packs_its_files_dirs_and_links_and_leaves_out_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/f"), b"data").unwrap();
        std::os::unix::fs::symlink("sub/f", root.join("link")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("out")).unwrap();
        let _socket = std::os::unix::net::UnixListener::bind(root.join("sock")).unwrap();
        let fifo = std::ffi::CString::new(root.join("fifo").to_string_lossy().as_bytes()).unwrap();
        // SAFETY: mkfifo(3) with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);

        let bytes = packed(root);
        let mut archive = tar::Archive::new(&bytes[..]);
        let mut seen: Vec<(String, tar::EntryType, Option<String>)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let link = e
                    .link_name()
                    .unwrap()
                    .map(|l| l.to_string_lossy().into_owned());
                (
                    e.path().unwrap().to_string_lossy().into_owned(),
                    e.header().entry_type(),
                    link,
                )
            })
            .collect();
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            seen,
            [
                ("link".into(), tar::EntryType::Symlink, Some("sub/f".into())),
                (
                    "out".into(),
                    tar::EntryType::Symlink,
                    Some("/etc/passwd".into())
                ),
                ("sub".into(), tar::EntryType::Directory, None),
                ("sub/f".into(), tar::EntryType::Regular, None),
            ]
        );
    }
}
