//! `berth cp`: copy one file into or out of a box, streamed both ways.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use anyhow::{bail, Context as _};
use berth_protocol::guest::{BoxUser, BOX_HOME, MAX_FILE_BYTES};
use bytes::Bytes;
use clap::Args;
use http::Method;
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWriteExt as _, ReadBuf};

use crate::args::box_path;
use crate::args::UserArg;
use crate::client::{query_value, Client};
use crate::cmd_cp_dir;

#[derive(Debug, Args)]
#[command(after_help = "\
Exactly one side is a box path, NAME:PATH. A relative PATH (or ~/PATH) is relative to \
/home/user; a box PATH ending in '/' (or empty) takes the local file's name. A local path \
that contains ':' can be written ./a:b. LOCAL '-' is stdout (download only). If LOCAL is a \
directory, the file keeps its name inside it.

Uploads keep the local file's permission bits and are written atomically in the box; they \
are limited to 256 MiB.

With -r, SRC is a directory, copied whole (regular files with their modes and mtimes, \
directories, symlinks as links; sockets, FIFOs and devices are skipped; setuid/setgid bits \
are dropped, except in the box with --user root), with no size limit. DST becomes the copy, merged into what is there; a box \
DST ending in '/' (or empty), or a LOCAL DST that is an existing directory or ends in '/', \
takes SRC's name inside it. Entries that would land outside DST (absolute names, '..', \
links out) are refused in either direction. Progress goes to stderr every half second when \
it is a terminal, and a summary line ends the copy.

Examples:
  berth cp ./report.csv alice:data/report.csv
  berth cp alice:/home/user/out.txt .
  berth cp alice:out.txt - | less
  berth cp -r ./project alice:            # -> /home/user/project
  berth cp -r alice:project ./backup      # ./backup is the copy")]
pub struct CpArgs {
    /// Where to copy from: a local file (a directory with -r), or NAME:PATH in a box.
    #[arg(value_name = "SRC")]
    pub src: String,
    /// Where to copy to: a local path ('-' for stdout), or NAME:PATH in a box.
    #[arg(value_name = "DST")]
    pub dst: String,
    /// Who reads or writes the file in the box: `user` (uid 1001) or `root` (the box's root).
    #[arg(long, value_enum, default_value_t = UserArg::User)]
    pub user: UserArg,
    /// Copy a whole directory (as one tar stream), with its symlinks and modes.
    #[arg(short = 'r', long)]
    pub recursive: bool,
}

/// One side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Location {
    Local(PathBuf),
    /// `NAME:PATH`; `path` as typed (resolved later).
    Box {
        name: String,
        path: String,
    },
}

/// `NAME:PATH` when the part before the first ':' could be a box name or id; anything else
/// (and anything starting with '/' or '.') is a local path.
fn parse_location(raw: &str) -> Location {
    if raw.starts_with('/') || raw.starts_with('.') {
        return Location::Local(PathBuf::from(raw));
    }
    match raw.split_once(':') {
        Some((name, path))
            if !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            Location::Box {
                name: name.to_string(),
                path: path.to_string(),
            }
        }
        _ => Location::Local(PathBuf::from(raw)),
    }
}

/// The absolute box path for a typed one. `file_name` fills in a directory-like path
/// (empty or ending in '/'); without one, such a path is an error.
fn absolute_box_path(typed: &str, file_name: Option<&str>) -> anyhow::Result<String> {
    let mut path = if typed.starts_with('/') {
        typed.to_string()
    } else if let Some(rest) = typed.strip_prefix("~/") {
        format!("{BOX_HOME}/{rest}")
    } else if typed == "~" || typed.is_empty() {
        format!("{BOX_HOME}/")
    } else {
        format!("{BOX_HOME}/{typed}")
    };
    if path.ends_with('/') {
        match file_name {
            Some(name) => path.push_str(name),
            None => bail!("box path {typed:?} names a directory; give a file path, or copy the directory with -r"),
        }
    }
    Ok(path)
}

/// What a `berth cp` will do, checked before the daemon is contacted.
#[derive(Debug)]
pub struct Plan {
    direction: Direction,
    user: BoxUser,
    recursive: bool,
}

#[derive(Debug)]
enum Direction {
    Upload {
        local: PathBuf,
        name: String,
        path: String,
    },
    Download {
        name: String,
        path: String,
        local: PathBuf,
    },
}

impl Plan {
    pub fn new(args: &CpArgs) -> anyhow::Result<Plan> {
        Ok(Plan {
            direction: direction(&args.src, &args.dst, args.recursive)?,
            user: args.user.into(),
            recursive: args.recursive,
        })
    }
}

fn direction(src: &str, dst: &str, recursive: bool) -> anyhow::Result<Direction> {
    match (parse_location(src), parse_location(dst)) {
        (Location::Local(local), Location::Box { name, path }) => {
            if local.as_os_str() == "-" {
                bail!("uploading from stdin is not supported yet; give a file");
            }
            // `.` and `..` have no name of their own: the directory's real one.
            let named = if recursive {
                std::fs::canonicalize(&local).unwrap_or_else(|_| local.clone())
            } else {
                local.clone()
            };
            let file_name = named
                .file_name()
                .and_then(|n| n.to_str())
                .map(str::to_string);
            let path = absolute_box_path(&path, file_name.as_deref())?;
            Ok(Direction::Upload { local, name, path })
        }
        (Location::Box { name, path }, Location::Local(local)) => {
            if recursive {
                if local.as_os_str() == "-" {
                    bail!("a directory cannot go to stdout; give a local directory");
                }
                let path = absolute_box_path(path.trim_end_matches('/'), None)
                    .or_else(|_| absolute_box_path("/home/user", None))?;
                let local = crate::cmd_cp_dir::download_target(&local, &path);
                return Ok(Direction::Download { name, path, local });
            }
            let path = absolute_box_path(&path, None)?;
            Ok(Direction::Download { name, path, local })
        }
        (Location::Local(_), Location::Local(_)) => bail!(
            "neither {src:?} nor {dst:?} is a box path; write one side as NAME:PATH \
             (e.g. alice:/home/user/a.txt)"
        ),
        (Location::Box { .. }, Location::Box { .. }) => {
            bail!("copying between boxes is not supported; copy through a local file")
        }
    }
}

pub async fn run(client: &Client, plan: Plan) -> anyhow::Result<()> {
    let user = plan.user.as_str();
    if plan.recursive {
        return match plan.direction {
            Direction::Upload { local, name, path } => {
                cmd_cp_dir::upload(client, &local, &name, &path, user).await
            }
            Direction::Download { name, path, local } => {
                cmd_cp_dir::download(client, &name, &path, &local, user).await
            }
        };
    }
    match plan.direction {
        Direction::Upload { local, name, path } => upload(client, &local, &name, &path, user).await,
        Direction::Download { name, path, local } => {
            download(client, &name, &path, &local, user).await
        }
    }
}

async fn upload(
    client: &Client,
    local: &Path,
    name: &str,
    path: &str,
    user: &str,
) -> anyhow::Result<()> {
    let file = tokio::fs::File::open(local)
        .await
        .with_context(|| format!("cannot open {}", local.display()))?;
    let meta = file
        .metadata()
        .await
        .with_context(|| format!("cannot stat {}", local.display()))?;
    if meta.is_dir() {
        bail!("{} is a directory; copy it with -r", local.display());
    }
    if !meta.is_file() {
        bail!("{} is not a regular file", local.display());
    }
    if meta.len() > MAX_FILE_BYTES {
        bail!(
            "{} is {} bytes; uploads are limited to {} MiB",
            local.display(),
            meta.len(),
            MAX_FILE_BYTES / (1024 * 1024)
        );
    }
    let mode = meta.permissions().mode() & 0o777;
    let query = format!("?path={}&user={user}&mode={mode}", query_value(path));
    let body = FileBody {
        file,
        remaining: meta.len(),
        buf: vec![0; UPLOAD_CHUNK_BYTES],
    };
    client
        .send(
            Method::PUT,
            &format!("{}{query}", box_path(name, "/files")),
            "application/json",
            Some("application/octet-stream"),
            Some(meta.len()),
            body.boxed(),
        )
        .await?;
    Ok(())
}

async fn download(
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
            &format!("{}{query}", box_path(name, "/files")),
            "application/octet-stream",
            None,
            None,
            crate::client::empty(),
        )
        .await?;
    let mut body = response.into_body();

    if local.as_os_str() == "-" {
        let mut out = std::io::stdout().lock();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame
                .context("reading the file from the daemon")?
                .into_data()
            {
                out.write_all(&data).context("writing to stdout")?;
            }
        }
        out.flush().context("writing to stdout")?;
        return Ok(());
    }

    // Where the file lands, as `cp -r` decides for a directory: into `local` when it is a
    // directory or ends in '/', the missing directories on the way made.
    let dest = crate::cmd_cp_dir::download_target(local, path);
    let dest = if dest.as_path() == local && local.to_string_lossy().ends_with('/') {
        local.join("download")
    } else {
        dest
    };
    let dir = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    tokio::fs::create_dir_all(dir)
        .await
        .with_context(|| format!("cannot create {}", dir.display()))?;
    save(body, &dest, "reading the file from the daemon", |_| {}).await
}

/// Writes `body` to `dest` (whose directory exists) through a file beside it, renamed at
/// the end, so a failed download never leaves a truncated file under the real name.
/// Errors name the destination: the temporary name means nothing to the user. `read`
/// says what a broken body was; `each` is told each chunk's length.
pub(crate) async fn save(
    mut body: hyper::body::Incoming,
    dest: &Path,
    read: &'static str,
    mut each: impl FnMut(usize),
) -> anyhow::Result<()> {
    let dir = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file_name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let partial = dir.join(format!(".{file_name}.berth-partial-{}", std::process::id()));
    let result = async {
        let mut file = tokio::fs::File::create(&partial)
            .await
            .with_context(|| format!("cannot create {}", dest.display()))?;
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.context(read)?.into_data() {
                each(data.len());
                file.write_all(&data)
                    .await
                    .with_context(|| format!("writing {}", dest.display()))?;
            }
        }
        file.sync_all()
            .await
            .with_context(|| format!("writing {}", dest.display()))?;
        tokio::fs::rename(&partial, dest)
            .await
            .with_context(|| format!("cannot write {}", dest.display()))
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&partial).await;
    }
    result
}

const UPLOAD_CHUNK_BYTES: usize = 256 * 1024;

/// A request body that reads a file in chunks as hyper asks for them, so an upload never
/// holds the whole file in memory. It sends exactly `remaining` bytes (the size announced
/// in `Content-Length`); a file that shrinks meanwhile is an error.
struct FileBody {
    file: tokio::fs::File,
    remaining: u64,
    buf: Vec<u8>,
}

impl Body for FileBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        if this.remaining == 0 {
            return Poll::Ready(None);
        }
        let want = usize::try_from(this.remaining)
            .unwrap_or(usize::MAX)
            .min(this.buf.len());
        let mut read_buf = ReadBuf::new(&mut this.buf[..want]);
        if let Err(e) = ready!(Pin::new(&mut this.file).poll_read(cx, &mut read_buf)) {
            return Poll::Ready(Some(Err(e)));
        }
        let filled = read_buf.filled();
        if filled.is_empty() {
            return Poll::Ready(Some(Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file shrank while it was being uploaded",
            ))));
        }
        this.remaining -= filled.len() as u64;
        Poll::Ready(Some(Ok(Frame::data(Bytes::copy_from_slice(filled)))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(name: &str, path: &str) -> Location {
        Location::Box {
            name: name.into(),
            path: path.into(),
        }
    }

    #[test]
    fn locations_parse() {
        assert_eq!(parse_location("alice:/tmp/a"), boxed("alice", "/tmp/a"));
        assert_eq!(parse_location("alice:a.txt"), boxed("alice", "a.txt"));
        assert_eq!(parse_location("bx_01abc:a"), boxed("bx_01abc", "a"));
        assert_eq!(parse_location("alice:"), boxed("alice", ""));
        assert_eq!(parse_location("a.txt"), Location::Local("a.txt".into()));
        assert_eq!(parse_location("./a:b"), Location::Local("./a:b".into()));
        assert_eq!(parse_location("/x/a:b"), Location::Local("/x/a:b".into()));
        assert_eq!(parse_location(":a"), Location::Local(":a".into()));
        assert_eq!(
            parse_location("we ird:a"),
            Location::Local("we ird:a".into())
        );
        assert_eq!(parse_location("-"), Location::Local("-".into()));
    }

    #[test]
    fn box_paths_resolve_against_home() {
        assert_eq!(absolute_box_path("/etc/x", None).unwrap(), "/etc/x");
        assert_eq!(
            absolute_box_path("a/b.txt", None).unwrap(),
            "/home/user/a/b.txt"
        );
        assert_eq!(
            absolute_box_path("~/b.txt", None).unwrap(),
            "/home/user/b.txt"
        );
        assert_eq!(
            absolute_box_path("", Some("f.bin")).unwrap(),
            "/home/user/f.bin"
        );
        assert_eq!(
            absolute_box_path("/tmp/", Some("f.bin")).unwrap(),
            "/tmp/f.bin"
        );
        assert!(absolute_box_path("/tmp/", None).is_err());
        assert!(absolute_box_path("", None).is_err());
    }

    #[test]
    fn copies_need_exactly_one_box_side() {
        assert!(matches!(
            direction("f.txt", "alice:", false).unwrap(),
            Direction::Upload { ref path, ref name, .. } if path == "/home/user/f.txt" && name == "alice"
        ));
        assert!(matches!(
            direction("alice:x/y", "-", false).unwrap(),
            Direction::Download { ref path, .. } if path == "/home/user/x/y"
        ));
        let err = direction("a", "b", false).unwrap_err().to_string();
        assert!(err.contains("NAME:PATH"), "{err}");
        let err = direction("a:x", "b:y", false).unwrap_err().to_string();
        assert!(err.contains("between boxes"), "{err}");
        assert!(direction("-", "alice:x", false).is_err());
    }

    #[test]
    fn recursive_copies_name_their_destination_like_cp_r() {
        let dir = tempfile::tempdir().unwrap();
        let proj = dir.path().join("proj");
        std::fs::create_dir(&proj).unwrap();
        // A box path ending in '/' (or empty) takes the local directory's name.
        let up = direction(proj.to_str().unwrap(), "alice:", true).unwrap();
        assert!(matches!(up, Direction::Upload { ref path, .. } if path == "/home/user/proj"));
        let up = direction(proj.to_str().unwrap(), "alice:work/p2", true).unwrap();
        assert!(matches!(up, Direction::Upload { ref path, .. } if path == "/home/user/work/p2"));
        // An existing local directory takes the box directory's name inside it; a new path
        // is the copy itself.
        let down = direction("alice:data/", dir.path().to_str().unwrap(), true).unwrap();
        assert!(
            matches!(down, Direction::Download { ref path, ref local, .. }
                if path == "/home/user/data" && *local == dir.path().join("data"))
        );
        let fresh = dir.path().join("fresh");
        let down = direction("alice:data", fresh.to_str().unwrap(), true).unwrap();
        assert!(matches!(down, Direction::Download { ref local, .. } if *local == fresh));
        assert!(direction("alice:data", "-", true).is_err());
    }

    #[tokio::test]
    async fn file_body_streams_the_whole_file_in_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..(UPLOAD_CHUNK_BYTES * 2 + 17))
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(&path, &data).unwrap();
        let file = tokio::fs::File::open(&path).await.unwrap();
        let body = FileBody {
            file,
            remaining: data.len() as u64,
            buf: vec![0; UPLOAD_CHUNK_BYTES],
        };
        assert_eq!(body.size_hint().exact(), Some(data.len() as u64));
        let collected = body.collect().await.unwrap().to_bytes();
        assert_eq!(collected.as_ref(), data.as_slice());
    }
}
