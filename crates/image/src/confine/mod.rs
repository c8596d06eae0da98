//! Every host tool that parses a box volume image (e2fsck, resize2fs, e2undo) runs here,
//! confined: a box's guest root may have written any bytes into that image, so the tool's
//! parser is attack surface and must not act as host root.
//!
//! The child, between fork and exec (the pieces are berth-confine's, shared with the VMM
//! jail and berth-init):
//! - a [`berth_confine::Jail`]: its own mount namespace whose root is a fresh read-only
//!   tmpfs holding only the host's `/usr` (read-only: the tool and its libraries, with the
//!   merged-usr links), `/dev/null`, an empty `/etc/mtab` and the files it works on, each
//!   bound alone (read-only unless the step must write);
//! - resource limits: address space ([`Limits::memory_bytes`]), CPU time, no core, few
//!   files; the parent kills it at [`Limits::deadline`];
//! - the checked [`berth_confine::PrivilegeDrop`] to [`TOOL_UID`]: an empty bounding set up
//!   to the kernel's last capability, no supplementary groups, no capability in any set;
//! - `no_new_privs` and the seccomp table [`berth_confine::tables::VOLUME_TOOL`] (its doc
//!   says what is refused): e2fsprogs needs file I/O only.
//!
//! The files it needs are lent to [`TOOL_UID`] for the run and given back after (to
//! berth's ids, with their modes: `lent.rs`).
//! Without root (a test or an unprivileged builder) there is nothing to drop: the tool
//! runs with the limits, `no_new_privs` and the filter only.

mod lent;
mod spawn;

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use berth_confine::{tables::VOLUME_TOOL, Access, ConfineError, Filter, Jail, PrivilegeDrop};

use crate::error::io;
use crate::tool::Tool;
use crate::ImageError;

/// The uid and gid a confined tool runs as: below every box's id range (which start at
/// 2^20) and used by nothing else.
pub const TOOL_UID: u32 = (1 << 20) - 2;

/// How much of a tool's stdout and stderr is kept (the end: a hostile image can make
/// e2fsck print without end).
const OUTPUT_TAIL: usize = 16 * 1024;

/// What a confined tool may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Its address space (`RLIMIT_AS`): e2fsck allocates bitmaps from the counts in the
    /// superblock, which a guest chose.
    pub memory_bytes: u64,
    /// Wall-clock time after which it is killed.
    pub deadline: Duration,
}

impl Limits {
    /// For a tool working on a volume image of `image_bytes`: 256 MiB plus 1/64 of the image
    /// (e2fsck's bitmaps and tables grow with the file system), and 60 s plus 1 s per GiB.
    pub fn for_image(image_bytes: u64) -> Limits {
        Limits {
            memory_bytes: (256 << 20) + image_bytes / 64,
            deadline: Duration::from_secs(60 + (image_bytes >> 30)),
        }
    }
}

/// A file the tool works on: `host` appears as `/<name>` in its root.
#[derive(Debug, Clone)]
pub struct Bind {
    pub host: PathBuf,
    pub name: &'static str,
    pub writable: bool,
}

impl Bind {
    pub fn read_only(host: &Path, name: &'static str) -> Bind {
        Bind {
            host: host.into(),
            name,
            writable: false,
        }
    }

    pub fn writable(host: &Path, name: &'static str) -> Bind {
        Bind {
            host: host.into(),
            name,
            writable: true,
        }
    }
}

/// What a confined tool did: its exit status and the end of what it printed.
#[derive(Debug)]
pub struct ToolOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl ToolOutput {
    /// stdout then stderr, trimmed, on one line (for a report or an error).
    pub fn report(&self) -> String {
        format!("{}\n{}", self.stdout.trim(), self.stderr.trim())
            .trim()
            .replace('\n', " | ")
    }
}

/// Runs `tool` with `args` confined (see the module doc), the `binds` its only files.
/// Arguments name those files by their inside path (`/<name>`). Errors when it cannot be
/// confined, cannot start, or outlives `limits.deadline` ([`ImageError::TookTooLong`]); a
/// tool that ran is returned whatever its exit status.
pub fn run(
    tool: Tool,
    args: &[&OsStr],
    binds: &[Bind],
    limits: Limits,
) -> Result<ToolOutput, ImageError> {
    let program = tool.locate()?;
    let program = std::fs::canonicalize(&program).map_err(io("resolve", &program))?;
    if !program.starts_with("/usr") {
        return Err(ImageError::Invalid {
            what: "confined tool",
            value: program.display().to_string(),
            why: "a confined tool must live under /usr (its root holds only /usr)",
        });
    }
    let out = run_confined(
        tool.name,
        (&program, &program),
        args,
        (binds, true),
        Stdio::null(),
        limits,
        Stdout::Tail,
    )?;
    Ok(ToolOutput {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: out.stderr,
    })
}

/// Where berth's own program is bound in the root of [`run_own`]'s child.
const OWN_PROGRAM_INSIDE: &str = "/berth";

/// Runs berth's own `program` (this very binary, in a mode that reads an image: the
/// volume reader) confined like a tool, bound read-only into its root as its only file;
/// `stdin` is what it reads (an image opened read-only here, so nothing is lent to it).
/// Its stdout is kept whole up to `stdout_cap` bytes ([`ImageError::TooMuchOutput`] past
/// it: the child is killed).
pub fn run_own(
    name: &'static str,
    program: &Path,
    args: &[&OsStr],
    stdin: std::fs::File,
    limits: Limits,
    stdout_cap: usize,
) -> Result<CapturedOutput, ImageError> {
    run_confined(
        name,
        (program, Path::new(OWN_PROGRAM_INSIDE)),
        args,
        (&[], false),
        Stdio::from(stdin),
        limits,
        Stdout::Whole { cap: stdout_cap },
    )
}

/// What a confined program printed, its stdout whole ([`run_own`]).
#[derive(Debug)]
pub struct CapturedOutput {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    /// The end of its stderr.
    pub stderr: String,
}

/// How much of a confined program's stdout is kept.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stdout {
    /// The last [`OUTPUT_TAIL`] bytes (a tool's report).
    Tail,
    /// All of it, up to `cap` bytes (an answer).
    Whole { cap: usize },
}

/// Runs a program confined: `(on the host, inside the jail)` are its paths, `(binds, lend)`
/// the files its root holds and whether they are lent to [`TOOL_UID`] for the run.
fn run_confined(
    name: &'static str,
    (host_program, inside_program): (&Path, &Path),
    args: &[&OsStr],
    (binds, lend): (&[Bind], bool),
    stdin: Stdio,
    limits: Limits,
    stdout: Stdout,
) -> Result<CapturedOutput, ImageError> {
    // SAFETY: geteuid has no arguments and cannot fail.
    let as_root = unsafe { libc::geteuid() } == 0;
    let mut cmd = Command::new(if as_root {
        inside_program
    } else {
        host_program
    });
    cmd.args(args)
        .env_clear()
        .env("LC_ALL", "C")
        .env("PATH", "/usr/sbin:/usr/bin")
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let filter = Filter::compile(&VOLUME_TOOL).map_err(confine_error)?;
    let rlimits = rlimits(limits);
    let root = if as_root { Some(jail_root()?) } else { None };
    let lent = if as_root && lend {
        lent::Lent::to_tool(binds)?
    } else {
        lent::Lent::default()
    };
    let jailed = match &root {
        Some(root) => Some((
            jail(
                root.path(),
                binds,
                (host_program != inside_program).then_some((host_program, inside_program)),
            )
            .prepare()
            .map_err(confine_error)?,
            PrivilegeDrop::to(TOOL_UID, TOOL_UID).map_err(confine_error)?,
        )),
        None => None,
    };
    // SAFETY: the closure runs in the forked child before exec and only makes system
    // calls on memory prepared above (no allocation, no locks).
    unsafe {
        cmd.pre_exec(move || {
            if let Some((jail, _)) = &jailed {
                jail.enter()?;
            }
            for (resource, value) in &rlimits {
                let lim = libc::rlimit {
                    rlim_cur: *value,
                    rlim_max: *value,
                };
                if libc::setrlimit(*resource, &lim) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some((_, drop)) = &jailed {
                drop.apply()?;
            }
            filter.install()?;
            Ok(())
        });
    }
    let result = spawn::spawn_and_wait(name, &mut cmd, limits.deadline, stdout);
    drop(lent);
    drop(root);
    result
}

/// The empty directory the jail's root is mounted on (in the child's namespace only).
fn jail_root() -> Result<tempfile::TempDir, ImageError> {
    tempfile::Builder::new()
        .prefix("berth-tool-")
        .tempdir()
        .map_err(io("create a root for a tool in", &std::env::temp_dir()))
}

/// What the tool's root holds besides `/usr`: `/dev/null` (some tools open it), an empty
/// mount table (e2fsprogs refuses to work on a file it cannot tell is not mounted, and
/// nothing is mounted in here), each of `binds` at `/<name>`, and a program from outside
/// `/usr` (`(host, inside)`) where it runs from.
fn jail(root: &Path, binds: &[Bind], program: Option<(&Path, &Path)>) -> Jail {
    let mut jail = Jail::new(root);
    jail.bind("/dev/null", Access::Device)
        .empty_file("/etc/mtab");
    if let Some((host, inside)) = program {
        jail.bind_at(host, inside, Access::Exec);
    }
    for bind in binds {
        let access = if bind.writable {
            Access::ReadWrite
        } else {
            Access::ReadOnly
        };
        jail.bind_at(&bind.host, Path::new("/").join(bind.name), access);
    }
    jail
}

fn confine_error(source: ConfineError) -> ImageError {
    ImageError::Confine { source }
}

fn rlimits(limits: Limits) -> Vec<(libc::__rlimit_resource_t, libc::rlim_t)> {
    vec![
        (libc::RLIMIT_AS, limits.memory_bytes),
        (libc::RLIMIT_CPU, limits.deadline.as_secs() + 1),
        (libc::RLIMIT_CORE, 0),
        (libc::RLIMIT_NOFILE, 64),
    ]
}

/// `/<name>` as an argument.
pub fn inside(name: &str) -> OsString {
    OsString::from(format!("/{name}"))
}

#[cfg(test)]
mod tests;
