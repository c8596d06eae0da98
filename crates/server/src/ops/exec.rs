//! `POST /v1/boxes/{ref}/exec`: run a process in the box (waking it first), either
//! collecting its output or handing back the frame stream.

use std::collections::BTreeMap;

use berth_protocol::guest::{BoxUser, ExecFrame, ExecRequest};
use berth_protocol::BoxId;
use berth_runtime::ExecStream;

use crate::ctx::Ctx;
use crate::error::OpError;

pub const DEFAULT_TIMEOUT_S: u64 = 60;
pub const MAX_TIMEOUT_S: u64 = 86_400;
/// Collected stdout and stderr are each cut past this many bytes.
pub const OUTPUT_CAP_BYTES: usize = 16 * 1024 * 1024;

/// A process to run, as a client asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecCommand {
    pub cmd: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    pub stdin: Option<String>,
    pub user: BoxUser,
    pub timeout_s: Option<u64>,
}

/// The collected result of one process.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ExecOutput {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    /// Whether stdout or stderr was cut at [`OUTPUT_CAP_BYTES`].
    pub truncated: bool,
}

impl ExecCommand {
    /// Checks the command and turns it into the guest channel's request; no `timeout_s`
    /// is [`DEFAULT_TIMEOUT_S`].
    pub fn into_request(self) -> Result<ExecRequest, OpError> {
        self.into_request_with(Some(DEFAULT_TIMEOUT_S))
    }

    /// As [`ExecCommand::into_request`], with `default_timeout_s` when the command sets
    /// none (`None`: no limit, for a background process).
    pub fn into_request_with(self, default_timeout_s: Option<u64>) -> Result<ExecRequest, OpError> {
        if self.cmd.is_empty() || self.cmd[0].is_empty() {
            return Err(OpError::InvalidExec {
                rule: "cmd needs a program",
            });
        }
        let timeout_s = self.timeout_s.or(default_timeout_s);
        if timeout_s.is_some_and(|t| !(1..=MAX_TIMEOUT_S).contains(&t)) {
            return Err(OpError::InvalidExec {
                rule: "timeout_s must be between 1 and 86400",
            });
        }
        if let Some(cwd) = &self.cwd {
            crate::validate::box_path(cwd)?;
        }
        Ok(ExecRequest {
            argv: self.cmd,
            env: self.env,
            cwd: self.cwd,
            user: self.user,
            stdin: self.stdin,
            timeout_ms: timeout_s.map(|t| t * 1000),
        })
    }
}

/// Starts the process and returns its frames as they come. Dropping the stream kills it.
/// The caller holds an activity guard (`ctx.activity.begin`) for as long as it reads the
/// stream, so the box is not idle meanwhile.
pub async fn exec_stream(
    ctx: &Ctx,
    id: &BoxId,
    mut command: ExecCommand,
) -> Result<ExecStream, OpError> {
    command.env = crate::box_env::env_for_box(ctx, id, std::mem::take(&mut command.env))?;
    let request = command.into_request()?;
    ctx.lifecycle()
        .with_guest(id, |client| {
            let request = request.clone();
            async move { client.exec(&request).await }
        })
        .await
}

/// Runs the process to its end and collects its output.
pub async fn exec_collect(
    ctx: &Ctx,
    id: &BoxId,
    command: ExecCommand,
) -> Result<ExecOutput, OpError> {
    let _busy = ctx.activity.begin(id);
    let mut stream = exec_stream(ctx, id, command).await?;
    let mut collector = Collector::default();
    while let Some(frame) = stream.next_frame().await? {
        if let Some(done) = collector.push(frame)? {
            return Ok(done);
        }
    }
    Err(OpError::ExecCut)
}

/// Folds frames into an [`ExecOutput`].
#[derive(Debug, Default)]
struct Collector {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    truncated: bool,
}

impl Collector {
    /// `Some` once the process has ended.
    fn push(&mut self, frame: ExecFrame) -> Result<Option<ExecOutput>, OpError> {
        match frame {
            ExecFrame::Started { .. } | ExecFrame::Unknown => Ok(None),
            ExecFrame::Stdout { data } => {
                self.truncated |= append_capped(&mut self.stdout, &data);
                Ok(None)
            }
            ExecFrame::Stderr { data } => {
                self.truncated |= append_capped(&mut self.stderr, &data);
                Ok(None)
            }
            ExecFrame::Exit {
                code,
                signal,
                timed_out,
            } => Ok(Some(ExecOutput {
                exit_code: ExecFrame::shell_status(code, signal),
                stdout: into_text(std::mem::take(&mut self.stdout)),
                stderr: into_text(std::mem::take(&mut self.stderr)),
                timed_out,
                truncated: self.truncated,
            })),
            ExecFrame::Error { code, message } => Err(OpError::ExecRefused { code, message }),
        }
    }
}

/// The output as text, reusing its buffer when it is valid UTF-8 (the usual case), so a
/// full 16 MiB stream is not held twice.
fn into_text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Appends up to the cap; `true` when something was cut.
fn append_capped(buf: &mut Vec<u8>, data: &[u8]) -> bool {
    let room = OUTPUT_CAP_BYTES.saturating_sub(buf.len());
    buf.extend_from_slice(&data[..data.len().min(room)]);
    data.len() > room
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(cmd: &[&str]) -> ExecCommand {
        ExecCommand {
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            env: BTreeMap::new(),
            cwd: None,
            stdin: None,
            user: BoxUser::User,
            timeout_s: None,
        }
    }

    #[test]
    fn requests_get_the_default_timeout_and_are_checked() {
        let req = command(&["id", "-u"]).into_request().unwrap();
        assert_eq!(req.timeout_ms, Some(60_000));
        assert_eq!(req.argv, ["id", "-u"]);
        assert!(command(&[]).into_request().is_err());
        assert!(ExecCommand {
            timeout_s: Some(0),
            ..command(&["true"])
        }
        .into_request()
        .is_err());
        assert!(ExecCommand {
            timeout_s: Some(86_401),
            ..command(&["true"])
        }
        .into_request()
        .is_err());
        assert!(ExecCommand {
            cwd: Some("tmp".into()),
            ..command(&["true"])
        }
        .into_request()
        .is_err());
    }

    #[test]
    fn frames_fold_into_output_with_signals_and_lossy_utf8() {
        let mut c = Collector::default();
        assert_eq!(c.push(ExecFrame::Started { pid: 3 }).unwrap(), None);
        c.push(ExecFrame::Stdout {
            data: b"hi\n".to_vec(),
        })
        .unwrap();
        c.push(ExecFrame::Stderr { data: vec![0xff] }).unwrap();
        let out = c
            .push(ExecFrame::Exit {
                code: None,
                signal: Some(9),
                timed_out: true,
            })
            .unwrap()
            .unwrap();
        assert_eq!(out.exit_code, 137);
        assert_eq!(out.stdout, "hi\n");
        assert_eq!(out.stderr, "\u{fffd}");
        assert!(out.timed_out && !out.truncated);
    }

    #[test]
    fn output_is_capped() {
        let mut c = Collector::default();
        c.push(ExecFrame::Stdout {
            data: vec![b'a'; OUTPUT_CAP_BYTES - 1],
        })
        .unwrap();
        c.push(ExecFrame::Stdout {
            data: b"bc".to_vec(),
        })
        .unwrap();
        let out = c
            .push(ExecFrame::Exit {
                code: Some(0),
                signal: None,
                timed_out: false,
            })
            .unwrap()
            .unwrap();
        assert_eq!(out.stdout.len(), OUTPUT_CAP_BYTES);
        assert!(out.stdout.ends_with('b') && out.truncated);
    }

    #[test]
    fn error_frames_become_typed_errors() {
        let err = Collector::default()
            .push(ExecFrame::Error {
                code: berth_protocol::ErrorCode::NotFound,
                message: "no such program".into(),
            })
            .unwrap_err();
        assert!(matches!(
            err,
            OpError::ExecRefused {
                code: berth_protocol::ErrorCode::NotFound,
                ..
            }
        ));
    }
}
