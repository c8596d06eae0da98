//! `berth exec`: run a command in a box, streaming its output as it comes.

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write};

use anyhow::Context as _;
use berth_protocol::guest::{BoxUser, ExecFrame};
use berth_protocol::process::ProcessInfo;
use berth_protocol::ErrorCode;
use clap::Args;
use http::Method;
use http_body_util::BodyExt as _;
use serde::Serialize;

use crate::args::{box_path, parse_env, UserArg, EXIT_NOT_FOUND, EXIT_TIMED_OUT};
use crate::client::{full, Client};

/// The daemon's default limit for a command (`--timeout`).
const DEFAULT_TIMEOUT_S: u64 = 60;
/// A frame line longer than this is refused (frames carry output chunks, far smaller).
const MAX_FRAME_LINE_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, Args)]
#[command(after_help = "\
Output is written as it arrives; berth exits with the command's exit status (128 + N when \
signal N ended it, 124 when it timed out, 127 when the program or the working directory \
was not found, 1 for any other failure).

stdin: when berth's own stdin is not a terminal (a pipe or a file), it streams to the \
command as the command reads it: any length, any bytes, in constant memory (the command \
then runs as a background process that berth follows; ^C is sent on to it). Use -n (or \
</dev/null) when nothing should be read. On a terminal, the command's stdin is empty.

-t (with -i: -it) runs the command on a terminal in the box instead: see `berth shell`.

Examples:
  berth exec alice -- sh -c 'echo hi > ~/a.txt; id -u'
  berth exec -it alice -- python3
  berth exec alice --user root --env DEBUG=1 --cwd /tmp -- ls -la
  echo hello | berth exec alice -- tr a-z A-Z
  berth exec alice -- tar x -C /home/user < big.tar
  berth exec --background alice -- python3 -m http.server 8000")]
pub struct ExecArgs {
    /// The box's name or id (`bx_…`). A stopped box is started first.
    pub name: String,
    /// Who runs the command: `user` (uid 1001, no capabilities) or `root` (the box's root,
    /// in its own user namespace; never host root).
    #[arg(long, value_enum, default_value_t = UserArg::User)]
    pub user: UserArg,
    /// Set an environment variable for the command (repeatable).
    #[arg(short, long = "env", value_name = "K=V", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Working directory inside the box (default: /home/user).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Kill the command after S seconds, 1-86400 (the daemon's default is 60).
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
    /// Do not read stdin, even when it is not a terminal.
    #[arg(short = 'n', long)]
    pub no_stdin: bool,
    /// Start the command in the background and print its process id at once; follow it
    /// with `berth process output NAME ID` (it runs until it exits or its --timeout).
    #[arg(long, conflicts_with_all = ["tty", "no_stdin"])]
    pub background: bool,
    /// With --background: the running process does not keep the box awake.
    #[arg(long, requires = "background")]
    pub no_keep_awake: bool,
    /// With --background: keep the process's stdin open for `berth process stdin`.
    #[arg(long, requires = "background")]
    pub open_stdin: bool,
    /// Keep stdin attached (with -t: keys go to the program as they are typed).
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// Run the command on a terminal in the box, as `berth shell NAME -- CMD` does
    /// (`-it` as with docker exec). Not with --timeout or -n.
    #[arg(short = 't', long, conflicts_with_all = ["timeout", "no_stdin", "json"])]
    pub tty: bool,
    /// Print the daemon's exec frames as they come, one JSON object a line (`started`,
    /// `stdout`, `stderr`, `exit`, `error`; docs/api.md), instead of the command's output.
    /// The exit status is still the command's.
    #[arg(long)]
    pub json: bool,
    /// The program and its arguments (put them after `--` when they start with `-`).
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub cmd: Vec<String>,
}

/// The first bytes of berth's stdin, or `None` at once when it is empty.
fn first_chunk_of_stdin() -> anyhow::Result<Option<bytes::Bytes>> {
    use std::io::Read as _;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match std::io::stdin().lock().read(&mut buf) {
            Ok(0) => return Ok(None),
            Ok(n) => {
                buf.truncate(n);
                return Ok(Some(bytes::Bytes::from(buf)));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(anyhow::Error::new(e).context("reading stdin")),
        }
    }
}

/// Body of `POST /v1/boxes/{ref}/exec`. Absent options are left out: the daemon's defaults.
#[derive(Debug, Serialize)]
struct ExecBody<'a> {
    cmd: &'a [String],
    env: BTreeMap<&'a str, &'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd: Option<&'a str>,
    user: BoxUser,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_s: Option<u64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    background: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    keep_awake: Option<bool>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    open_stdin: bool,
}

/// The program could not run (an `error` frame from the box).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ExecFailed {
    pub code: ErrorCode,
    pub message: String,
}

impl ExecFailed {
    pub fn exit_status(&self) -> u8 {
        match self.code {
            ErrorCode::NotFound => EXIT_NOT_FOUND,
            _ => 1,
        }
    }
}

/// How a finished command ended, from its last frame.
#[derive(Debug, PartialEq, Eq)]
enum Ending {
    Exited(u8),
    TimedOut,
}

/// `None` for frames that do not end the stream; an `error` frame is an error.
fn ending(frame: &ExecFrame) -> Result<Option<Ending>, ExecFailed> {
    match frame {
        ExecFrame::Exit {
            timed_out: true, ..
        } => Ok(Some(Ending::TimedOut)),
        ExecFrame::Exit {
            code,
            signal,
            timed_out: false,
        } => {
            let status = ExecFrame::shell_status(*code, *signal);
            // A Unix exit status is 0-255; anything else would be a daemon bug, and must
            // not pass for success.
            Ok(Some(Ending::Exited(u8::try_from(status).unwrap_or(1))))
        }
        ExecFrame::Error { code, message } => Err(ExecFailed {
            code: *code,
            message: message.clone(),
        }),
        ExecFrame::Started { .. } | ExecFrame::Stdout { .. } | ExecFrame::Stderr { .. } => Ok(None),
        ExecFrame::Unknown => Ok(None),
    }
}

pub async fn run(client: &Client, args: ExecArgs) -> anyhow::Result<u8> {
    if args.tty {
        let shell = crate::cmd_shell::ShellArgs {
            name: args.name,
            user: args.user,
            cwd: args.cwd,
            env: args.env,
            grace: None,
            attach: None,
            cmd: args.cmd,
        };
        return crate::cmd_shell::run(client, shell).await;
    }
    // A piped stdin streams to the command; an empty one (</dev/null, a script's closed
    // stdin) is no stdin at all, so the command runs as a plain exec.
    let first_stdin = if !args.background && !args.no_stdin && !std::io::stdin().is_terminal() {
        first_chunk_of_stdin()?
    } else {
        None
    };
    let mut body = ExecBody {
        cmd: &args.cmd,
        env: args
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        cwd: args.cwd.as_deref(),
        user: args.user.into(),
        timeout_s: args.timeout,
        background: args.background,
        keep_awake: args.no_keep_awake.then_some(false),
        open_stdin: args.open_stdin,
    };
    if args.background {
        let started: ProcessInfo = client
            .json(
                Method::POST,
                &box_path(&args.name, "/exec"),
                Some(&body),
                "the started process",
            )
            .await?;
        if args.json {
            crate::output::json(&mut std::io::stdout().lock(), &started)?;
        } else {
            println!("{}", started.id);
        }
        return Ok(0);
    }
    if let Some(first) = first_stdin {
        // Any length, any bytes, in constant memory: the command runs as a background
        // process with stdin open while berth streams its own stdin to it.
        body.background = true;
        body.open_stdin = true;
        body.timeout_s = Some(args.timeout.unwrap_or(DEFAULT_TIMEOUT_S));
        return crate::cmd_process::exec_streaming(client, &args.name, &body, first, args.json)
            .await;
    }
    let json = serde_json::to_vec(&body).context("encoding the exec request")?;
    let response = client
        .send(
            Method::POST,
            &box_path(&args.name, "/exec"),
            "application/x-ndjson",
            Some("application/json"),
            None,
            full(json),
        )
        .await?;

    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if content_type.is_some_and(|ct| ct.starts_with("application/json")) {
        // A daemon that answers in one piece (it ignored our Accept).
        let bytes = response
            .into_body()
            .collect()
            .await
            .context("reading the exec answer")?
            .to_bytes();
        let answer: BufferedAnswer =
            serde_json::from_slice(&bytes).context("bad exec answer from the daemon")?;
        if args.json {
            let raw: serde_json::Value = serde_json::from_slice(&bytes)?;
            crate::output::json_line(&mut std::io::stdout().lock(), &raw)?;
            return Ok(u8::try_from(answer.exit_code).unwrap_or(1));
        }
        return finish_buffered(answer, args.timeout);
    }

    follow(response.into_body(), args.timeout, args.json).await
}

/// Writes the output frames of an NDJSON exec stream as they come (with `json`, the frames
/// themselves); the command's status.
async fn follow(
    mut body: hyper::body::Incoming,
    timeout_s: Option<u64>,
    json: bool,
) -> anyhow::Result<u8> {
    let mut pending: Vec<u8> = Vec::new();
    let mut finished = false;
    loop {
        let chunk = match body.frame().await {
            Some(frame) => frame.context("reading the exec stream")?,
            None => {
                finished = true;
                hyper::body::Frame::data(bytes::Bytes::new())
            }
        };
        if let Ok(data) = chunk.into_data() {
            pending.extend_from_slice(&data);
        }
        // Every complete line is a frame; at the end, a last line may lack its newline.
        while let Some(line) = next_line(&mut pending, finished) {
            let frame: ExecFrame = serde_json::from_slice(&line).with_context(|| {
                let text = String::from_utf8_lossy(&line);
                format!("bad exec frame from the daemon: {:.200}", text)
            })?;
            if json {
                let mut out = std::io::stdout().lock();
                out.write_all(&line)?;
                out.write_all(b"\n")?;
                out.flush()?;
            } else {
                write_output(&frame)?;
            }
            match ending(&frame)? {
                Some(Ending::Exited(status)) => return Ok(status),
                Some(Ending::TimedOut) => return Ok(timed_out(timeout_s)),
                None => {}
            }
        }
        if finished {
            anyhow::bail!(
                "the exec stream ended before the command did (did the daemon or the box stop?)"
            );
        }
        if pending.len() > MAX_FRAME_LINE_BYTES {
            anyhow::bail!("the daemon sent an exec frame over {MAX_FRAME_LINE_BYTES} bytes");
        }
    }
}

fn timed_out(timeout_s: Option<u64>) -> u8 {
    let after = timeout_s
        .map(|s| format!(" after {s}s"))
        .unwrap_or_default();
    eprintln!("berth: the command timed out{after} and was killed");
    EXIT_TIMED_OUT
}

/// The exec answer without `Accept: application/x-ndjson` (lossy UTF-8 output).
#[derive(Debug, serde::Deserialize)]
struct BufferedAnswer {
    exit_code: i32,
    #[serde(default)]
    stdout: String,
    #[serde(default)]
    stderr: String,
    #[serde(default)]
    timed_out: bool,
}

fn finish_buffered(answer: BufferedAnswer, timeout_s: Option<u64>) -> anyhow::Result<u8> {
    write_output(&ExecFrame::Stdout {
        data: answer.stdout.into_bytes(),
    })?;
    write_output(&ExecFrame::Stderr {
        data: answer.stderr.into_bytes(),
    })?;
    if answer.timed_out {
        return Ok(timed_out(timeout_s));
    }
    Ok(u8::try_from(answer.exit_code).unwrap_or(1))
}

/// Takes the next non-blank line out of `pending`; with `at_end`, also an unterminated one.
fn next_line(pending: &mut Vec<u8>, at_end: bool) -> Option<Vec<u8>> {
    loop {
        let line = match pending.iter().position(|&b| b == b'\n') {
            Some(pos) => {
                let mut line: Vec<u8> = pending.drain(..=pos).collect();
                line.pop();
                line
            }
            None if at_end && !pending.is_empty() => std::mem::take(pending),
            None => return None,
        };
        if !line.trim_ascii().is_empty() {
            return Some(line);
        }
    }
}

fn write_output(frame: &ExecFrame) -> anyhow::Result<()> {
    match frame {
        ExecFrame::Stdout { data } => {
            let mut out = std::io::stdout().lock();
            out.write_all(data)
                .and_then(|()| out.flush())
                .context("writing to stdout")
        }
        ExecFrame::Stderr { data } => {
            let mut err = std::io::stderr().lock();
            err.write_all(data)
                .and_then(|()| err.flush())
                .context("writing to stderr")
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cli;
    use clap::Parser as _;

    fn parse(args: &[&str]) -> ExecArgs {
        match Cli::try_parse_from(args).unwrap().command {
            crate::Command::Exec(exec) => exec,
            other => panic!("not exec: {other:?}"),
        }
    }

    #[test]
    fn exec_args_parse_with_and_without_double_dash() {
        let a = parse(&[
            "berth",
            "exec",
            "alice",
            "--user",
            "root",
            "-e",
            "A=1",
            "--env",
            "B=x=y",
            "--cwd",
            "/tmp",
            "--timeout",
            "5",
            "--",
            "sh",
            "-c",
            "exit 3",
        ]);
        assert_eq!(a.name, "alice");
        assert_eq!(a.user, UserArg::Root);
        assert_eq!(
            a.env,
            vec![("A".into(), "1".into()), ("B".into(), "x=y".into())]
        );
        assert_eq!(a.cwd.as_deref(), Some("/tmp"));
        assert_eq!(a.timeout, Some(5));
        assert_eq!(a.cmd, ["sh", "-c", "exit 3"]);

        let a = parse(&["berth", "exec", "alice", "ls", "-la"]);
        assert_eq!(a.user, UserArg::User);
        assert_eq!(a.cmd, ["ls", "-la"]);
    }

    #[test]
    fn exec_args_are_checked() {
        assert!(
            crate::Cli::try_parse_from(["berth", "exec", "alice"]).is_err(),
            "no command"
        );
        assert!(crate::Cli::try_parse_from([
            "berth", "exec", "alice", "--env", "NOEQ", "--", "true"
        ])
        .is_err());
        assert!(crate::Cli::try_parse_from([
            "berth", "exec", "alice", "--user", "admin", "--", "true"
        ])
        .is_err());
    }

    #[test]
    fn body_leaves_unset_options_to_the_daemon() {
        let a = parse(&["berth", "exec", "alice", "--", "id", "-u"]);
        let body = ExecBody {
            cmd: &a.cmd,
            env: BTreeMap::new(),
            cwd: None,
            user: a.user.into(),
            timeout_s: None,
            background: false,
            keep_awake: None,
            open_stdin: false,
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            serde_json::json!({"cmd":["id","-u"],"env":{},"user":"user"})
        );
    }

    #[test]
    fn frames_map_to_exit_statuses() {
        let exit = |code, signal, timed_out| ExecFrame::Exit {
            code,
            signal,
            timed_out,
        };
        assert_eq!(
            ending(&exit(Some(0), None, false)).unwrap(),
            Some(Ending::Exited(0))
        );
        assert_eq!(
            ending(&exit(Some(3), None, false)).unwrap(),
            Some(Ending::Exited(3))
        );
        assert_eq!(
            ending(&exit(None, Some(9), false)).unwrap(),
            Some(Ending::Exited(137))
        );
        assert_eq!(
            ending(&exit(Some(1000), None, false)).unwrap(),
            Some(Ending::Exited(1))
        );
        assert_eq!(
            ending(&exit(None, Some(9), true)).unwrap(),
            Some(Ending::TimedOut)
        );
        assert_eq!(ending(&ExecFrame::Stdout { data: vec![1] }).unwrap(), None);
        assert_eq!(ending(&ExecFrame::Unknown).unwrap(), None);

        let err = ending(&ExecFrame::Error {
            code: ErrorCode::NotFound,
            message: "no such program: x".into(),
        })
        .unwrap_err();
        assert_eq!(err.exit_status(), EXIT_NOT_FOUND);
        assert_eq!(err.to_string(), "no such program: x");
        let err = ending(&ExecFrame::Error {
            code: ErrorCode::InvalidRequest,
            message: "bad cwd".into(),
        })
        .unwrap_err();
        assert_eq!(err.exit_status(), 1);
    }

    #[test]
    fn lines_split_on_newlines_and_skip_blanks() {
        let mut pending = b"{\"a\":1}\n\n{\"b\":2}\n{\"c\"".to_vec();
        assert_eq!(next_line(&mut pending, false).unwrap(), b"{\"a\":1}");
        assert_eq!(next_line(&mut pending, false).unwrap(), b"{\"b\":2}");
        assert_eq!(next_line(&mut pending, false), None);
        assert_eq!(pending, b"{\"c\"");
        assert_eq!(next_line(&mut pending, true).unwrap(), b"{\"c\"");
        assert_eq!(next_line(&mut pending, true), None);
    }
}
