//! `berth process …` (a box's background processes) and what `berth exec` uses to stream
//! its stdin: a background process with stdin open, its output followed to the exit.

use std::io::Write as _;

use anyhow::Context as _;
use berth_protocol::process::{OutputStream, ProcessExit, ProcessFrame, ProcessInfo, ProcessList};
use berth_protocol::ErrorCode;
use bytes::Bytes;
use clap::{Args, Subcommand};
use http::Method;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::args::box_path;
use crate::client::{empty, path_segment, Client, ClientError, ReqBody};
use crate::output;
use crate::table::table;

/// A frame line longer than this is refused (frames carry 8 KiB chunks).
const MAX_FRAME_LINE_BYTES: usize = 1024 * 1024;

#[derive(Debug, Subcommand)]
pub enum ProcessCommand {
    /// List a box's background processes (`berth exec --background` starts them).
    Ls {
        /// The box's name or id.
        name: String,
        /// Print the daemon's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a process's output (stdout and stderr) as it comes, until it exits; exits
    /// with its status.
    Output(OutputArgs),
    /// Send a signal to a process (default TERM).
    Kill {
        name: String,
        /// The process (`pr_…`).
        id: String,
        /// HUP, INT, QUIT, KILL, USR1, USR2, TERM, CONT, STOP, TSTP or WINCH.
        #[arg(short, long, default_value = "TERM")]
        signal: String,
    },
    /// Send berth's stdin to a process started with --open-stdin (streamed, any length).
    Stdin {
        name: String,
        /// The process (`pr_…`).
        id: String,
        /// Close the process's stdin after (it then sees its end).
        #[arg(long)]
        close: bool,
    },
}

#[derive(Debug, Args)]
pub struct OutputArgs {
    pub name: String,
    /// The process (`pr_…`).
    pub id: String,
    /// Start at this output offset (bytes of stdout and stderr already seen).
    #[arg(long, default_value_t = 0)]
    pub offset: u64,
    /// Print the daemon's frames, one JSON object a line, instead of the output.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(client: &Client, command: ProcessCommand) -> anyhow::Result<u8> {
    match command {
        ProcessCommand::Ls { name, json } => {
            let list: ProcessList = client
                .json(
                    Method::GET,
                    &box_path(&name, "/processes"),
                    None::<&()>,
                    "process list",
                )
                .await?;
            if json {
                output::json(&mut std::io::stdout().lock(), &list)?;
            } else {
                print_list(&list);
            }
            Ok(0)
        }
        ProcessCommand::Output(args) => {
            let exit = follow(client, &args.name, &args.id, args.offset, args.json).await?;
            Ok(status(&exit))
        }
        ProcessCommand::Kill { name, id, signal } => {
            #[derive(Serialize)]
            struct Signal<'a> {
                signal: &'a str,
            }
            let path = process_path(&name, &id, "/signal");
            client
                .no_content(Method::POST, &path, Some(&Signal { signal: &signal }))
                .await?;
            Ok(0)
        }
        ProcessCommand::Stdin { name, id, close } => {
            send_stdin(client, &name, &id, close).await?;
            Ok(0)
        }
    }
}

fn print_list(list: &ProcessList) {
    let rows: Vec<Vec<String>> = list
        .processes
        .iter()
        .map(|p| {
            let state = match p.exit {
                Some(exit) => format!("exited {}", exit.shell_status()),
                None => "running".to_owned(),
            };
            vec![
                p.id.clone(),
                p.pid.to_string(),
                state,
                if p.keep_awake { "yes" } else { "no" }.to_owned(),
                p.argv.join(" "),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["ID", "PID", "STATE", "KEEPS AWAKE", "COMMAND"], &rows)
    );
}

fn process_path(name: &str, id: &str, verb: &str) -> String {
    box_path(name, &format!("/processes/{}{verb}", path_segment(id)))
}

/// The status a shell would report for `exit` (124 for a timeout, as timeout(1) does).
pub fn status(exit: &ProcessExit) -> u8 {
    if exit.timed_out {
        return crate::args::EXIT_TIMED_OUT;
    }
    u8::try_from(exit.shell_status()).unwrap_or(1)
}

/// Prints the process's output from `offset` until its exit frame (or, with `json`, the
/// frames themselves); a stream cut short is resumed from where it got to.
pub async fn follow(
    client: &Client,
    name: &str,
    id: &str,
    mut offset: u64,
    json: bool,
) -> anyhow::Result<ProcessExit> {
    let mut resumed = 0;
    loop {
        let path = format!("{}?offset={offset}", process_path(name, id, "/output"));
        let response = client
            .send(
                Method::GET,
                &path,
                "application/x-ndjson",
                None,
                None,
                empty(),
            )
            .await?;
        let exit = read_frames(response.into_body(), |frame| {
            if json {
                output::json_line(&mut std::io::stdout().lock(), &frame)?;
            }
            match frame {
                ProcessFrame::Output {
                    stream,
                    offset: at,
                    data,
                } => {
                    if at > offset {
                        eprintln!(
                            "berth: {} bytes of output were no longer kept in the box (it keeps the last MiB)",
                            at - offset
                        );
                    }
                    offset = at + data.len() as u64;
                    if !json {
                        write_output(stream, &data)?;
                    }
                    Ok(None)
                }
                ProcessFrame::Exit { exit, .. } => Ok(Some(exit)),
                ProcessFrame::Unknown => Ok(None),
            }
        })
        .await?;
        if let Some(exit) = exit {
            return Ok(exit);
        }
        resumed += 1;
        anyhow::ensure!(
            resumed <= 5,
            "the output stream of process {id} keeps breaking; resume with `berth process output {name} {id} --offset {offset}`"
        );
    }
}

/// Reads the NDJSON [`ProcessFrame`]s of `body` (a process's output, a service's log),
/// handing each to `each` until the body ends (`None`) or `each` answers `Some`.
pub async fn read_frames<T>(
    mut body: Incoming,
    mut each: impl FnMut(ProcessFrame) -> anyhow::Result<Option<T>>,
) -> anyhow::Result<Option<T>> {
    let mut pending = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.context("reading the daemon's stream")?.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        anyhow::ensure!(
            pending.len() <= MAX_FRAME_LINE_BYTES,
            "the daemon sent an output frame longer than {MAX_FRAME_LINE_BYTES} bytes"
        );
        while let Some(pos) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=pos).collect();
            if line.trim_ascii().is_empty() {
                continue;
            }
            let frame: ProcessFrame =
                serde_json::from_slice(&line).context("a bad output frame from the daemon")?;
            if let Some(done) = each(frame)? {
                return Ok(Some(done));
            }
        }
    }
    Ok(None)
}

/// Writes output bytes where they came from: stderr's to berth's stderr, the rest to its
/// stdout, each flushed at once.
pub fn write_output(stream: OutputStream, data: &[u8]) -> anyhow::Result<()> {
    match stream {
        OutputStream::Stderr => {
            let mut err = std::io::stderr().lock();
            err.write_all(data)?;
            err.flush()?;
        }
        _ => {
            let mut out = std::io::stdout().lock();
            out.write_all(data)?;
            out.flush()?;
        }
    }
    Ok(())
}

/// Streams berth's stdin to the process (any length: read as the box takes it).
pub async fn send_stdin(client: &Client, name: &str, id: &str, close: bool) -> anyhow::Result<()> {
    send_stdin_after(client, name, id, close, None).await
}

/// As [`send_stdin`], `first` (what was already read from stdin) going first.
async fn send_stdin_after(
    client: &Client,
    name: &str,
    id: &str,
    close: bool,
    first: Option<Bytes>,
) -> anyhow::Result<()> {
    let mut path = process_path(name, id, "/stdin");
    if close {
        path.push_str("?close=true");
    }
    client
        .send(
            Method::POST,
            &path,
            "application/json",
            Some("application/octet-stream"),
            None,
            stdin_body(first),
        )
        .await?;
    Ok(())
}

/// berth's stdin as a request body, read on a thread of its own (a blocking read), a few
/// chunks ahead at most.
fn stdin_body(first: Option<Bytes>) -> ReqBody {
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(4);
    std::thread::spawn(move || {
        use std::io::Read as _;
        if let Some(first) = first {
            if tx.blocking_send(Ok(first)).is_err() {
                return;
            }
        }
        let mut stdin = std::io::stdin().lock();
        loop {
            let mut buf = vec![0u8; 256 * 1024];
            match stdin.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    buf.truncate(n);
                    if tx.blocking_send(Ok(Bytes::from(buf))).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            }
        }
    });
    let frames = futures_util::stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((chunk.map(hyper::body::Frame::data), rx))
    });
    http_body_util::StreamBody::new(frames).boxed()
}

/// `berth exec` with a piped stdin whose first bytes, `first`, are already read: the
/// command starts as a background process with stdin open, the rest of berth's stdin
/// streams to it while its output is printed, and ^C is sent on to it.
pub async fn exec_streaming(
    client: &Client,
    name: &str,
    body: &impl Serialize,
    first: Bytes,
    json: bool,
) -> anyhow::Result<u8> {
    let started: ProcessInfo = match client
        .json(
            Method::POST,
            &box_path(name, "/exec"),
            Some(body),
            "the started process",
        )
        .await
    {
        Ok(started) => started,
        Err(e) => return Err(start_failure(client, name, e).await),
    };
    let id = started.id;
    let feed = send_stdin_after(client, name, &id, true, Some(first));
    let watch = follow(client, name, &id, 0, json);
    tokio::pin!(feed, watch);
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut feeding = true;
    loop {
        tokio::select! {
            fed = &mut feed, if feeding => {
                feeding = false;
                if let Err(e) = fed {
                    // The process may have stopped reading (it exited, or closed stdin):
                    // its output and status still tell the story.
                    tracing::debug!(error = %format!("{e:#}"), "stdin not all sent");
                }
            }
            exit = &mut watch => return Ok(status(&exit?)),
            _ = interrupt.recv() => {
                let path = process_path(name, &id, "/signal");
                let signal = serde_json::json!({"signal": "INT"});
                let _ = client.no_content(Method::POST, &path, Some(&signal)).await;
            }
        }
    }
}

/// A start refused as `not_found` is the program or its working directory, as exec's
/// `error` frame would say (exit 127), when the box itself is there; else the error as it
/// came (no such box: exit 1).
async fn start_failure(client: &Client, name: &str, error: ClientError) -> anyhow::Error {
    if let ClientError::Api {
        code: ErrorCode::NotFound,
        message,
        ..
    } = &error
    {
        let the_box: Result<serde_json::Value, _> = client
            .json(Method::GET, &box_path(name, ""), None::<&()>, "a box")
            .await;
        if the_box.is_ok() {
            return anyhow::Error::new(crate::args::ExecFailed {
                code: ErrorCode::NotFound,
                message: message.clone(),
            });
        }
    }
    error.into()
}
