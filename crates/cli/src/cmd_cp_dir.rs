//! `berth cp -r`: a directory into or out of a box, as one tar stream each way.
//!
//! Both directions stream: the tar is built (or extracted) on a blocking thread that
//! meets the HTTP body through a channel of a few chunks, so memory stays small whatever
//! the tree's size. Progress (bytes so far) goes to stderr every half second when stderr
//! is a terminal; a summary line ends every copy.

use std::io::{self, IsTerminal as _, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use berth_protocol::files::ArchiveWritten;
use bytes::Bytes;
use http::Method;
use http_body_util::BodyExt as _;
use hyper::body::Frame;
use tokio::sync::mpsc;

use crate::args::box_path;
use crate::client::{query_value, Client};
use crate::tar_bounds::BoundedTar;

const CHUNK_BYTES: usize = 256 * 1024;
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// Bytes moved so far, shown on stderr while a copy runs.
struct Progress {
    bytes: Arc<AtomicU64>,
    started: Instant,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    fn start(what: String) -> Progress {
        let bytes = Arc::new(AtomicU64::new(0));
        let ticker = io::stderr().is_terminal().then(|| {
            let bytes = bytes.clone();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(PROGRESS_EVERY);
                every.tick().await;
                loop {
                    every.tick().await;
                    let so_far = bytes.load(Ordering::Relaxed);
                    eprint!("\r\x1b[K{what}: {}", human(so_far));
                }
            })
        });
        Progress {
            bytes,
            started: Instant::now(),
            ticker,
        }
    }

    fn finish(self, summary: &str) {
        if let Some(ticker) = self.ticker {
            ticker.abort();
            eprint!("\r\x1b[K");
        }
        let secs = self.started.elapsed().as_secs_f64();
        eprintln!("{summary} in {secs:.1} s");
    }
}

fn human(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if bytes as f64 >= MIB {
        format!("{:.1} MiB", bytes as f64 / MIB)
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

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
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(4);
    let counted = progress.bytes.clone();
    let root = local.to_path_buf();
    let packer = tokio::task::spawn_blocking(move || {
        let mut out = ChannelWriter {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK_BYTES),
            counted,
        };
        let packed = pack(&root, &mut out).and_then(|()| out.send());
        if let Err(err) = &packed {
            let _ = tx.blocking_send(Err(io::Error::new(err.kind(), err.to_string())));
        }
        packed
    });
    let body = ChannelBody { rx }.boxed();
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
fn pack(root: &Path, out: &mut ChannelWriter) -> io::Result<()> {
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
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    let dest = local.to_path_buf();
    let unpacker = tokio::task::spawn_blocking(move || {
        unpack(
            &dest,
            ChannelReader {
                rx,
                current: Bytes::new(),
            },
        )
    });
    let mut body = response.into_body();
    let mut fed: anyhow::Result<()> = Ok(());
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    progress
                        .bytes
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                    if tx.send(data).await.is_err() {
                        break;
                    }
                }
            }
            Err(err) => {
                fed = Err(err).context("the box's archive stream broke off");
                break;
            }
        }
    }
    drop(tx);
    let unpacked = unpacker.await.context("the extraction stopped")?;
    fed?;
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
fn unpack(dest: &Path, input: ChannelReader) -> io::Result<()> {
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

struct ChannelWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
    counted: Arc<AtomicU64>,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK_BYTES));
        self.counted
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        self.tx
            .blocking_send(Ok(Bytes::from(chunk)))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the upload stopped"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK_BYTES - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK_BYTES {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// The download's chunks as a `Read`; a stream that broke off ends the channel without
/// the tar's end, which the tar reader reports.
struct ChannelReader {
    rx: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(data) => self.current = data,
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.current.len());
        out[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// The tar as a request body, chunk by chunk as the packer makes them.
struct ChannelBody {
    rx: mpsc::Receiver<io::Result<Bytes>>,
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<io::Result<Frame<Bytes>>>> {
        self.rx
            .poll_recv(cx)
            .map(|chunk| chunk.map(|r| r.map(Frame::data)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(root: &Path) -> Vec<u8> {
        let (tx, mut rx) = mpsc::channel(1024);
        let mut out = ChannelWriter {
            tx,
            buf: Vec::new(),
            counted: Arc::new(AtomicU64::new(0)),
        };
        let root = root.to_path_buf();
        let packer = std::thread::spawn(move || pack(&root, &mut out).and_then(|()| out.send()));
        let mut bytes = Vec::new();
        while let Some(chunk) = rx.blocking_recv() {
            bytes.extend_from_slice(&chunk.unwrap());
        }
        packer.join().unwrap().unwrap();
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
