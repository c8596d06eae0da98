//! `Start` and `Connect`: a process's or PTY's events, `StartEvent` (its pid) first, then
//! its output as `DataEvent`s, then one `EndEvent` when it exits.
//!
//! - A command is started as a berth background process and followed from offset 0 on the
//!   same answer (one call to the box); `Connect` follows a running one from offset 0 too,
//!   so it gets the output berth still holds (the last 512 KiB), then what comes.
//! - A PTY is a berth terminal, attached from its first byte; `Connect` reattaches (a
//!   terminal has one attachment at a time, so an earlier stream of the same PTY ends).
//!   While a stream is attached, `SendInput` writes through it ([`super::input`]).
//! - Each stream holds one of the tenant's stream slots; nothing is read from the box but
//!   as the client reads, and a client that goes away ends the reading.

use berth_e2b_wire::process::{
    process_event::{self, data_event::Output},
    ConnectRequest, ConnectResponse, ProcessConfig, ProcessEvent, StartRequest, StartResponse,
};
use berth_e2b_wire::{Code, ConnectError};
use berth_protocol::process::{OutputStream, ProcessFrame, MAX_TAG_BYTES};
use berth_protocol::terminal::{TerminalSize, MAX_GRACE_MS};
use berth_runtime::ProcessOutput;
use futures_util::{Stream, StreamExt};
use tokio::io::AsyncReadExt;

use super::select::{self, Target};
use super::{box_of, pty_inputs, ProcessCallError};
use crate::ctx::Ctx;
use crate::e2b::envd::caller::EnvdCaller;
use crate::e2b::envd::connect_serve::Events;
use crate::e2b::envd::error::connect_error;
use crate::ops::exec::ExecCommand;
use crate::ops::process::{self, Background};
use crate::ops::terminal::{self, Attached, TerminalCommand, TerminalTarget};

/// One read of PTY output, sent as one `DataEvent`.
const PTY_CHUNK: usize = 32 * 1024;

type ProcessEvents =
    std::pin::Pin<Box<dyn Stream<Item = Result<ProcessEvent, ConnectError>> + Send>>;

/// `Start`: a new command (or PTY, with `pty`) as the caller's user.
pub async fn start(
    ctx: &Ctx,
    caller: &EnvdCaller,
    req: StartRequest,
) -> Result<Events<StartResponse>, ConnectError> {
    let config = req.process.ok_or(ProcessCallError::NoConfig)?;
    if req.tag.as_ref().is_some_and(|t| t.len() > MAX_TAG_BYTES) {
        return Err(ProcessCallError::LongTag.into());
    }
    let slot = ctx
        .streams
        .take(&caller.sandbox.tenant)
        .map_err(connect_error)?;
    let events = match req.pty {
        Some(pty) => {
            let size = pty.size.unwrap_or_default();
            start_terminal(ctx, caller, config, size, req.tag).await?
        }
        None => start_process(ctx, caller, config, req.stdin, req.tag).await?,
    };
    let events = slot.holding(events.map(|e| e.map(|event| StartResponse { event: Some(event) })));
    Ok(Box::pin(events))
}

/// `Connect`: the running process or PTY the selector names.
pub async fn connect(
    ctx: &Ctx,
    caller: &EnvdCaller,
    req: ConnectRequest,
) -> Result<Events<ConnectResponse>, ConnectError> {
    let slot = ctx
        .streams
        .take(&caller.sandbox.tenant)
        .map_err(connect_error)?;
    let id = box_of(caller);
    let events = match select::find(ctx, caller, req.process).await? {
        Target::Process(info) => {
            let output = process::output(ctx, id, &info.id, 0)
                .await
                .map_err(connect_error)?;
            process_events(info.pid, output)
        }
        Target::Terminal(info) => {
            let target = TerminalTarget::Existing {
                id: info.id,
                offset: Some(0),
                size: None,
            };
            let attached = terminal::attach(ctx, id, target)
                .await
                .map_err(connect_error)?;
            terminal_events(ctx, caller, info.pid, attached)
        }
    };
    let events =
        slot.holding(events.map(|e| e.map(|event| ConnectResponse { event: Some(event) })));
    Ok(Box::pin(events))
}

async fn start_process(
    ctx: &Ctx,
    caller: &EnvdCaller,
    config: ProcessConfig,
    stdin: Option<bool>,
    tag: Option<String>,
) -> Result<ProcessEvents, ConnectError> {
    let id = box_of(caller);
    let command = ExecCommand {
        cmd: std::iter::once(config.cmd).chain(config.args).collect(),
        env: config.envs.into_iter().collect(),
        cwd: config.cwd,
        stdin: None,
        user: caller.user,
        timeout_s: None,
    };
    let background = Background {
        command,
        // A command runs until it exits or is killed, as in envd; the sandbox's own
        // timeout bounds it.
        keep_awake: true,
        // Absent means open: the proto's default for older SDKs.
        open_stdin: stdin.unwrap_or(true),
        tag,
    };
    let (info, output) = process::start_followed(ctx, id, background)
        .await
        .map_err(connect_error)?;
    Ok(process_events(info.pid, output))
}

async fn start_terminal(
    ctx: &Ctx,
    caller: &EnvdCaller,
    config: ProcessConfig,
    size: berth_e2b_wire::process::pty::Size,
    tag: Option<String>,
) -> Result<ProcessEvents, ConnectError> {
    let size = terminal_size(size)?;
    let command = TerminalCommand {
        cmd: std::iter::once(config.cmd).chain(config.args).collect(),
        term: config.envs.get("TERM").cloned(),
        env: config.envs.into_iter().collect(),
        user: caller.user,
        cwd: config.cwd,
        size,
        // envd's PTYs live until they exit or are killed, attached or not.
        grace_s: Some(MAX_GRACE_MS / 1000),
        tag,
    };
    let (info, attached) = terminal::open(ctx, box_of(caller), command)
        .await
        .map_err(connect_error)?;
    Ok(terminal_events(ctx, caller, info.pid, attached))
}

/// A PTY size as berth's terminals take it.
pub fn terminal_size(
    size: berth_e2b_wire::process::pty::Size,
) -> Result<TerminalSize, ConnectError> {
    let cell = |n: u32| u16::try_from(n).ok().filter(|n| (1..=4096).contains(n));
    match (cell(size.cols), cell(size.rows)) {
        (Some(cols), Some(rows)) => Ok(TerminalSize { cols, rows }),
        _ => Err(ProcessCallError::BadSize {
            cols: size.cols,
            rows: size.rows,
        }
        .into()),
    }
}

fn event(event: process_event::Event) -> ProcessEvent {
    ProcessEvent { event: Some(event) }
}

fn started(pid: u32) -> ProcessEvent {
    event(process_event::Event::Start(process_event::StartEvent {
        pid,
    }))
}

fn data(output: Output) -> ProcessEvent {
    event(process_event::Event::Data(process_event::DataEvent {
        output: Some(output),
    }))
}

/// The end as envd reports it (Go's `ProcessState`): an exit is `exited` with its code and
/// `"exit status N"`; a signal is exit code -1, not `exited`, `"signal: killed"`. A failure
/// (any but a zero exit) repeats the status as `error`.
fn ended(code: Option<i32>, signal: Option<i32>) -> ProcessEvent {
    let (exit_code, exited, status) = match (code, signal) {
        (Some(code), _) => (code, true, format!("exit status {code}")),
        (None, Some(signal)) => (-1, false, format!("signal: {}", signal_name(signal))),
        (None, None) => (-1, false, "unknown".to_owned()),
    };
    let error = (exit_code != 0).then(|| status.clone());
    event(process_event::Event::End(process_event::EndEvent {
        exit_code,
        exited,
        status,
        error,
    }))
}

/// A signal's description as Go's `syscall.Signal.String()` words it on Linux.
fn signal_name(signal: i32) -> String {
    let name = match signal {
        1 => "hangup",
        2 => "interrupt",
        3 => "quit",
        4 => "illegal instruction",
        6 => "aborted",
        7 => "bus error",
        8 => "floating point exception",
        9 => "killed",
        10 => "user defined signal 1",
        11 => "segmentation fault",
        12 => "user defined signal 2",
        13 => "broken pipe",
        14 => "alarm clock",
        15 => "terminated",
        _ => return format!("signal {signal}"),
    };
    name.to_owned()
}

/// The box's output stream ended before the exit frame: the box stopped, or the
/// connection to it broke.
fn cut() -> ConnectError {
    ConnectError::new(
        Code::Unavailable,
        "the box's output stream ended before the process did (the sandbox stopped, or the connection to it broke); Connect again to follow it",
    )
}

/// A background process's events from its output frames.
fn process_events(pid: u32, output: ProcessOutput) -> ProcessEvents {
    let frames = futures_util::stream::unfold(Some(output), |state| async move {
        let mut output = state?;
        loop {
            let frame = match output.next_frame().await {
                Ok(Some(frame)) => frame,
                Ok(None) => return Some((Err(cut()), None)),
                Err(error) => {
                    tracing::debug!(error = %berth_runtime::error_chain(&error), "e2b: process output from the box broke");
                    return Some((Err(cut()), None));
                }
            };
            let event = match frame {
                ProcessFrame::Output {
                    stream,
                    data: bytes,
                    ..
                } => match stream {
                    OutputStream::Stdout => data(Output::Stdout(bytes)),
                    OutputStream::Stderr => data(Output::Stderr(bytes)),
                    OutputStream::Unknown => continue,
                },
                ProcessFrame::Exit { exit, .. } => {
                    return Some((Ok(ended(exit.code, exit.signal)), None));
                }
                ProcessFrame::Unknown => continue,
            };
            return Some((Ok(event), Some(output)));
        }
    });
    Box::pin(futures_util::stream::iter([Ok(started(pid))]).chain(frames))
}

/// A terminal's events from its attachment; while the stream lives, its input side is
/// where `SendInput` writes.
fn terminal_events(ctx: &Ctx, caller: &EnvdCaller, pid: u32, attached: Attached) -> ProcessEvents {
    let Attached {
        client, id, stream, ..
    } = attached;
    let (output, writer) = tokio::io::split(stream.stream);
    let box_id = box_of(caller).clone();
    let registration = pty_inputs::register(&ctx.e2b.pty_inputs, &box_id, &id, writer);
    // The box stays awake while a client is attached, as for berth's own terminals.
    let busy = ctx.activity.begin(&box_id);
    let state = Some((output, client, id, registration, busy));
    let chunks = futures_util::stream::unfold(state, |state| async move {
        let (mut output, client, id, registration, busy) = state?;
        let mut buffer = vec![0u8; PTY_CHUNK];
        match output.read(&mut buffer).await {
            Ok(0) => {}
            Ok(n) => {
                buffer.truncate(n);
                let state = Some((output, client, id, registration, busy));
                return Some((Ok(data(Output::Pty(buffer))), state));
            }
            Err(error) => {
                tracing::debug!(error = %error, "e2b: PTY output from the box broke");
                return Some((Err(cut()), None));
            }
        }
        // The agent closed the stream: the program ended and all its output is sent, or
        // another attachment took the terminal over.
        drop(registration);
        let last = match client.terminal(&id).await {
            Ok(info) => match info.exit {
                Some(exit) => Ok(ended(exit.code, exit.signal)),
                None => Err(ConnectError::new(
                    Code::Aborted,
                    "another Connect to this PTY took it over (a PTY streams to one connection at a time)",
                )),
            },
            Err(error) => {
                tracing::debug!(error = %berth_runtime::error_chain(&error), "e2b: a PTY's end could not be read");
                Err(cut())
            }
        };
        drop(busy);
        Some((last, None))
    });
    Box::pin(futures_util::stream::iter([Ok(started(pid))]).chain(chunks))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(event: ProcessEvent) -> process_event::EndEvent {
        match event.event {
            Some(process_event::Event::End(end)) => end,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ends_read_as_envds() {
        let ok = end(ended(Some(0), None));
        assert_eq!(
            (ok.exit_code, ok.exited, ok.status.as_str()),
            (0, true, "exit status 0")
        );
        assert_eq!(ok.error, None);
        let failed = end(ended(Some(3), None));
        assert_eq!(failed.error.as_deref(), Some("exit status 3"));
        let killed = end(ended(None, Some(9)));
        assert_eq!(
            (killed.exit_code, killed.exited, killed.status.as_str()),
            (-1, false, "signal: killed")
        );
        assert_eq!(end(ended(None, Some(15))).status, "signal: terminated");
    }

    #[test]
    fn pty_sizes_are_checked() {
        use berth_e2b_wire::process::pty::Size;
        assert!(terminal_size(Size { cols: 80, rows: 24 }).is_ok());
        assert!(terminal_size(Size { cols: 0, rows: 24 }).is_err());
        assert!(terminal_size(Size {
            cols: 80,
            rows: 70_000
        })
        .is_err());
    }
}
