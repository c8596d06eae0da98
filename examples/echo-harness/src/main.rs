//! `echo-harness`: a tiny stream-json agent for berth's tests and demos. It speaks like
//! Claude Code's `-p --input-format stream-json --output-format stream-json --verbose
//! --replay-user-messages`:
//!
//! - At start it creates a session (a random hex id) or resumes one (`--resume <id>`,
//!   loading `~/.echo-harness/<id>.jsonl`), writes the id to `~/.berth/session`, and prints
//!   `{"type":"system","subtype":"init","session_id":…,"cwd":…,"tools":[],"model":"echo"}`.
//! - For each stdin line `{"type":"user","message":{"role":"user","content":…}}` it first
//!   replays the line as-is (berth's acknowledgement), then prints an `assistant` and a
//!   `result` line. The turn goes to the transcript (fsync'd) and to
//!   `$ECHO_HARNESS_MEMORY/timeline/<YYYY-MM-DD>.md` (default `/memory`).
//! - Answers: `remember X` → `OK, I will remember X.`; anything containing `what did I say`
//!   → `You said: ` and the earlier user messages of the session joined with `; `;
//!   otherwise `echo: ` and the content.
//!
//! Test hooks: content `crash` exits with status 3 after the replay, before answering;
//! `flood N` prints one non-JSON line of N bytes first; `sleep MS` waits MS ms first;
//! `last MS` waits MS ms, answers, and exits with status 3 before reading another line;
//! `stream N` answers in N `assistant` lines 300 ms apart (`chunk 001 of 00N. `…);
//! `ECHO_HARNESS_DEAF=1` never reads stdin; `ECHO_HARNESS_NO_REPLAY=1` answers without
//! replaying the user line (like Claude Code without `--replay-user-messages`);
//! `ECHO_HARNESS_NO_RESULT=1` never prints a `result` line (a turn that never ends).

mod answer;
mod session;
mod timeline;

use std::io::{self, BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use crate::answer::{answer, hook, stream_chunk, user_text, Hook, STREAM_PAUSE};
use crate::session::Session;

fn main() {
    if let Err(err) = run() {
        eprintln!("echo-harness: {err}");
        std::process::exit(1);
    }
}

fn parse_resume() -> Result<Option<String>, String> {
    let mut resume = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        // Claude Code's other flags are accepted and ignored, so templates can share them.
        if arg == "--resume" {
            resume = Some(args.next().ok_or("--resume needs a session id")?);
        }
    }
    match resume {
        Some(id) if !session::valid_id(&id) => Err(format!("invalid session id {id:?}")),
        other => Ok(other),
    }
}

fn emit(out: &mut impl Write, value: &Value) -> io::Result<()> {
    writeln!(out, "{value}")?;
    out.flush()
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let resume = parse_resume()?;
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/home/user".into()));
    let memory =
        PathBuf::from(std::env::var_os("ECHO_HARNESS_MEMORY").unwrap_or_else(|| "/memory".into()));
    let id = match resume {
        Some(id) => id,
        None => session::new_id()?,
    };
    let mut session = Session::open(&home, id)?;
    let cwd = std::env::current_dir().unwrap_or_default();
    let stdout = io::stdout();
    let mut out = stdout.lock();
    emit(
        &mut out,
        &json!({"type":"system","subtype":"init","session_id":session.id,
                "cwd":cwd.to_string_lossy(),"tools":[],"model":"echo"}),
    )?;
    if env_flag("ECHO_HARNESS_DEAF") {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    let replay = !env_flag("ECHO_HARNESS_NO_REPLAY");
    let result = !env_flag("ECHO_HARNESS_NO_RESULT");
    for line in io::stdin().lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let Some(content) = serde_json::from_str::<Value>(&line)
            .ok()
            .as_ref()
            .and_then(user_text)
        else {
            eprintln!("echo-harness: ignoring a line that is not a user message");
            continue;
        };
        if replay {
            // The replay is the acknowledgement: the line exactly as it came.
            writeln!(out, "{line}")?;
            out.flush()?;
        }
        let mut streamed = None;
        let mut last = false;
        match hook(&content) {
            Some(Hook::Crash) => std::process::exit(3),
            Some(Hook::Flood(n)) => flood(&mut out, n)?,
            Some(Hook::Sleep(ms)) => std::thread::sleep(Duration::from_millis(ms)),
            Some(Hook::Last(ms)) => {
                std::thread::sleep(Duration::from_millis(ms));
                last = true;
            }
            Some(Hook::Stream(n)) => streamed = Some(n),
            None => {}
        }
        let parts: Vec<String> = match streamed {
            Some(n) => (1..=n).map(|i| stream_chunk(i, n)).collect(),
            None => vec![answer(&content, &session.user_messages)],
        };
        let text = parts.concat();
        session.record(&content, &text)?;
        if let Err(err) = timeline::append(&memory, &content, &text) {
            eprintln!("echo-harness: cannot append to the timeline: {err}");
        }
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                std::thread::sleep(STREAM_PAUSE);
            }
            let message_id = format!("msg_echo_{}_{}_{i}", session.id, session.turns);
            emit(
                &mut out,
                &json!({"type":"assistant","message":{"id":message_id,"type":"message","role":"assistant",
                        "content":[{"type":"text","text":part}],"model":"echo"},"session_id":session.id}),
            )?;
        }
        if result {
            emit(
                &mut out,
                &json!({"type":"result","subtype":"success","is_error":false,"result":text,
                        "session_id":session.id,"num_turns":session.turns}),
            )?;
        }
        if last {
            std::process::exit(3);
        }
    }
    Ok(())
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

/// One line of `n` bytes (`x`s), written in chunks.
fn flood(out: &mut impl Write, n: usize) -> io::Result<()> {
    let chunk = [b'x'; 64 * 1024];
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len());
        out.write_all(&chunk[..k])?;
        left -= k;
    }
    out.write_all(b"\n")?;
    out.flush()
}
