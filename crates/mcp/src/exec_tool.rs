//! `box_exec`: a command in a box, its output cut to a model's size.
//!
//! The exec is streamed (`Accept: application/x-ndjson`), not collected: the daemon then
//! holds one frame at a time instead of up to 2 × 16 MiB of output, and the tool keeps only
//! the start and end of each stream ([`HeadTail`]), counting the middle.

use berth_protocol::guest::ExecFrame;
use http::Method;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::answer::{self, Line, Lines};
use crate::api::ApiRequest;
use crate::calls::{box_path, Cx};
use crate::error::ToolError;
use crate::limits::{
    EXEC_DEFAULT_TIMEOUT_S, EXEC_HEAD_BYTES, EXEC_MAX_TIMEOUT_S, EXEC_TAIL_BYTES,
    MAX_STREAM_LINE_BYTES,
};
use crate::truncate::HeadTail;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecArgs {
    /// The box's name or id (bx_…). A stopped or sleeping box is woken first.
    #[serde(rename = "box")]
    pub box_ref: String,
    /// The command, run by `/bin/sh -c` in the box (pipes, redirects and `&&` work).
    pub command: String,
    /// The working directory, an absolute path (default /home/user).
    #[serde(default)]
    pub cwd: Option<String>,
    /// "user" (the default: uid 1001, no capabilities) or "root" (the box's own root,
    /// never the host's).
    #[serde(default)]
    pub user: Option<ExecUser>,
    /// Seconds before the command's process group is killed (default 60, at most 600).
    #[serde(default)]
    pub timeout_s: Option<u64>,
    /// Text fed to the command's stdin (none by default).
    #[serde(default)]
    pub stdin: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ExecUser {
    User,
    Root,
}

pub async fn exec(cx: Cx<'_>, args: ExecArgs) -> Result<String, ToolError> {
    let timeout_s = args.timeout_s.unwrap_or(EXEC_DEFAULT_TIMEOUT_S);
    if !(1..=EXEC_MAX_TIMEOUT_S).contains(&timeout_s) {
        return Err(ToolError::Argument {
            field: "timeout_s",
            reason: "must be 1 to 600 seconds (start longer work in the background: `nohup … &`)",
        });
    }
    let body = json!({
        "cmd": ["/bin/sh", "-c", args.command],
        "cwd": args.cwd,
        "user": match args.user.unwrap_or(ExecUser::User) {
            ExecUser::User => "user",
            ExecUser::Root => "root",
        },
        "timeout_s": timeout_s,
        "stdin": args.stdin,
    });
    let request = ApiRequest::with_json(Method::POST, box_path(&args.box_ref, "/exec"), body)
        .accepting("application/x-ndjson");
    let answer = answer::check(cx.call(request).await?).await?;
    let mut output = Output::default();
    let mut lines = Lines::new(answer.body, MAX_STREAM_LINE_BYTES);
    while let Some(line) = lines.next().await? {
        let Line::Text(line) = line else {
            return Err(ToolError::FrameTooLong {
                limit_bytes: MAX_STREAM_LINE_BYTES,
            });
        };
        if line.is_empty() {
            continue;
        }
        let frame: ExecFrame = serde_json::from_str(&line).map_err(|source| ToolError::Decode {
            what: "an exec frame",
            source,
        })?;
        if let Some(ending) = output.take(frame)? {
            return Ok(output.render(&ending));
        }
    }
    Err(ToolError::ExecCut)
}

/// How the command ended.
#[derive(Debug)]
struct Ending {
    status: i32,
    timed_out: bool,
}

/// A command's two output streams as they arrive, each cut the same way.
struct Output {
    stdout: HeadTail,
    stderr: HeadTail,
}

impl Default for Output {
    fn default() -> Output {
        Output {
            stdout: HeadTail::new(EXEC_HEAD_BYTES, EXEC_TAIL_BYTES),
            stderr: HeadTail::new(EXEC_HEAD_BYTES, EXEC_TAIL_BYTES),
        }
    }
}

impl Output {
    /// Takes one frame; the command's ending once it is there.
    fn take(&mut self, frame: ExecFrame) -> Result<Option<Ending>, ToolError> {
        match frame {
            ExecFrame::Stdout { data } => self.stdout.push(&data),
            ExecFrame::Stderr { data } => self.stderr.push(&data),
            ExecFrame::Exit {
                code,
                signal,
                timed_out,
            } => {
                return Ok(Some(Ending {
                    status: ExecFrame::shell_status(code, signal),
                    timed_out,
                }))
            }
            ExecFrame::Error { code, message } => {
                return Err(ToolError::ExecFailed { code, message })
            }
            ExecFrame::Started { .. } | ExecFrame::Unknown => {}
        }
        Ok(None)
    }

    fn render(&self, ending: &Ending) -> String {
        let mut text = format!("exit_code: {}", ending.status);
        if ending.timed_out {
            text.push_str(" (killed: the command ran past its timeout_s)");
        }
        for (name, stream) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            if stream.total() == 0 {
                continue;
            }
            text.push_str(&format!("\n--- {name} ({} bytes) ---\n", stream.total()));
            text.push_str(&stream.render());
        }
        if self.stdout.is_cut() || self.stderr.is_cut() {
            text.push_str(
                "\n[output was cut to its start and end; to see the rest, redirect it to a \
                 file in the command (`… > /tmp/out.txt`) and read parts of it with \
                 box_read_file (offset) or `sed -n`/`grep`]",
            );
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_shown_per_stream_and_the_status_folds_signals() {
        let mut out = Output::default();
        assert!(out.take(ExecFrame::Started { pid: 1 }).unwrap().is_none());
        out.take(ExecFrame::Stdout {
            data: b"hi\n".to_vec(),
        })
        .unwrap();
        let ending = out
            .take(ExecFrame::Exit {
                code: None,
                signal: Some(9),
                timed_out: true,
            })
            .unwrap()
            .unwrap();
        assert_eq!(
            out.render(&ending),
            "exit_code: 137 (killed: the command ran past its timeout_s)\n--- stdout (3 bytes) ---\nhi\n"
        );
    }

    #[test]
    fn long_output_says_how_to_get_the_rest() {
        let mut out = Output::default();
        for _ in 0..1000 {
            out.take(ExecFrame::Stderr {
                data: vec![b'x'; 1000],
            })
            .unwrap();
        }
        let text = out.render(&Ending {
            status: 1,
            timed_out: false,
        });
        assert!(text.contains("--- stderr (1000000 bytes) ---"), "{text}");
        assert!(text.contains("bytes left out"), "{text}");
        assert!(
            text.len() < EXEC_HEAD_BYTES + EXEC_TAIL_BYTES + 1024,
            "{}",
            text.len()
        );
    }

    #[test]
    fn a_command_that_cannot_start_is_an_error() {
        let err = Output::default()
            .take(ExecFrame::Error {
                code: berth_protocol::ErrorCode::NotFound,
                message: "no such program".into(),
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the command could not run: no such program (not_found)"
        );
    }
}
