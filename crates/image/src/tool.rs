//! The host tools the builder runs, and running them with errors that name the Debian
//! package to install.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::ImageError;

/// A host program and the Debian package that ships it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tool {
    pub name: &'static str,
    pub package: &'static str,
}

pub(crate) const MKFS_EXT4: Tool = Tool::new("mkfs.ext4", "e2fsprogs");
pub(crate) const DEBUGFS: Tool = Tool::new("debugfs", "e2fsprogs");
pub(crate) const RESIZE2FS: Tool = Tool::new("resize2fs", "e2fsprogs");
pub(crate) const E2FSCK: Tool = Tool::new("e2fsck", "e2fsprogs");
pub(crate) const E2UNDO: Tool = Tool::new("e2undo", "e2fsprogs");
pub(crate) const DEPMOD: Tool = Tool::new("depmod", "kmod");
pub(crate) const DPKG: Tool = Tool::new("dpkg", "dpkg");
pub(crate) const APT_GET: Tool = Tool::new("apt-get", "apt");
pub(crate) const APT_CACHE: Tool = Tool::new("apt-cache", "apt");
pub(crate) const DEBOOTSTRAP: Tool = Tool::new("debootstrap", "debootstrap");

/// Where sbin tools live when a non-root `PATH` lacks them.
const SBIN_DIRS: &[&str] = &["/usr/sbin", "/sbin", "/usr/bin", "/bin"];
/// How much of a failed tool's stderr goes into the error.
const STDERR_TAIL: usize = 1500;

impl Tool {
    const fn new(name: &'static str, package: &'static str) -> Self {
        Tool { name, package }
    }

    /// The program's path, from `PATH` or the sbin dirs.
    pub fn locate(&self) -> Result<PathBuf, ImageError> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain(SBIN_DIRS.iter().map(PathBuf::from))
            .map(|dir| dir.join(self.name))
            .find(|p| is_executable(p))
            .ok_or(ImageError::MissingTool {
                tool: self.name,
                package: self.package,
            })
    }

    /// A command for this tool (fails when it is not installed).
    pub fn command(&self) -> Result<Command, ImageError> {
        let mut cmd = Command::new(self.locate()?);
        cmd.env("LC_ALL", "C");
        Ok(cmd)
    }

    /// Runs `cmd` to the end; its stdout on success.
    pub fn run(&self, cmd: &mut Command) -> Result<Vec<u8>, ImageError> {
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|source| self.spawn_error(source))?;
        if out.status.success() {
            return Ok(out.stdout);
        }
        Err(ImageError::ToolFailed {
            command: describe(cmd),
            status: out.status,
            stderr: tail(&out.stderr, &out.stdout),
        })
    }

    /// Runs `cmd`, handing each stdout line to `line` as it comes (for progress).
    pub fn run_streaming(
        &self,
        cmd: &mut Command,
        mut line: impl FnMut(&str),
    ) -> Result<(), ImageError> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| self.spawn_error(source))?;
        let mut stderr = child.stderr.take().expect("stderr is piped");
        // Drained on its own thread so a chatty stderr cannot block the child.
        let err_reader = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = stderr.read_to_end(&mut buf);
            buf
        });
        let mut last = Vec::new();
        let stdout = child.stdout.take().expect("stdout is piped");
        for l in BufReader::new(stdout).lines() {
            let Ok(l) = l else { break };
            line(&l);
            last = l.into_bytes();
        }
        let status = child.wait().map_err(|source| self.spawn_error(source))?;
        let err = err_reader.join().unwrap_or_default();
        if status.success() {
            return Ok(());
        }
        Err(ImageError::ToolFailed {
            command: describe(cmd),
            status,
            stderr: tail(&err, &last),
        })
    }

    fn spawn_error(&self, source: std::io::Error) -> ImageError {
        if source.kind() == std::io::ErrorKind::NotFound {
            ImageError::MissingTool {
                tool: self.name,
                package: self.package,
            }
        } else {
            ImageError::Spawn {
                tool: self.name,
                source,
            }
        }
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The command line, for an error message.
pub(crate) fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}

/// The end of stderr (or of stdout, when stderr is empty), trimmed, on one line.
fn tail(stderr: &[u8], stdout: &[u8]) -> String {
    let bytes = if stderr.iter().all(u8::is_ascii_whitespace) {
        stdout
    } else {
        stderr
    };
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    let start = text
        .char_indices()
        .rev()
        .nth(STDERR_TAIL)
        .map_or(0, |(i, _)| i);
    text[start..].replace('\n', " | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_names_its_package() {
        let tool = Tool::new("berth-no-such-tool", "berth-pkg");
        match tool.command() {
            Err(ImageError::MissingTool { tool, package }) => {
                assert_eq!((tool, package), ("berth-no-such-tool", "berth-pkg"));
            }
            other => panic!("expected MissingTool, got {other:?}"),
        }
    }

    #[test]
    fn a_failing_tool_reports_its_stderr() {
        let tool = Tool::new("sh", "dash");
        let mut cmd = tool.command().unwrap();
        cmd.args(["-c", "echo out; echo boom >&2; exit 3"]);
        let err = tool.run(&mut cmd).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("boom") && msg.contains("exit status: 3"),
            "{msg}"
        );
    }
}
