//! `berth shell NAME [-- CMD]` and `berth exec -it`: a terminal in a box, as `ssh` or
//! `docker exec -it` give one. The local terminal is in raw mode while attached (every
//! key, ^C included, goes to the box), window-size changes are forwarded, and the local
//! terminal is restored on every way out. berth exits with the program's status.

use std::io::{IsTerminal as _, Write as _};

use anyhow::Context as _;
use berth_protocol::terminal::{ClientControl, ServerControl, TerminalSize};
use clap::Args;
use futures_util::{SinkExt as _, StreamExt as _};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::args::UserArg;
use crate::client::{path_segment, query_value, Client};
use crate::raw_terminal::{window_size, RawMode};

/// Exit status when the connection ended before the program did.
const EXIT_CONNECTION_LOST: u8 = 255;
/// EOT: what ^D sends. Sent when berth's own stdin (a pipe) ends.
const END_OF_TRANSMISSION: u8 = 0x04;

#[derive(Debug, Args)]
#[command(after_help = "\
The terminal is in raw mode while attached: every key goes to the box (^C interrupts the \
program in the box, not berth). Window-size changes are forwarded. When the connection \
drops, the terminal lives on in the box for its grace period (60 s by default) and \
`berth shell NAME --attach ID` (the id is printed) picks it up where it was, without \
losing output.

Examples:
  berth shell alice
  berth shell alice -- htop
  berth shell alice --user root --cwd /tmp
  berth exec -it alice -- python3")]
pub struct ShellArgs {
    /// The box's name or id (`bx_…`). A stopped box is started first.
    pub name: String,
    /// Who runs the program: `user` (uid 1001) or `root` (the box's root, never host root).
    #[arg(long, value_enum, default_value_t = UserArg::User)]
    pub user: UserArg,
    /// Working directory inside the box (default: the user's home).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Set an environment variable for the program (repeatable).
    #[arg(short, long = "env", value_name = "K=V", value_parser = crate::args::parse_env)]
    pub env: Vec<(String, String)>,
    /// How long the terminal lives on in the box after the connection drops (seconds).
    #[arg(long, value_name = "S")]
    pub grace: Option<u64>,
    /// Attach to a terminal still open in the box (its id, `tm_…`) instead of starting one.
    #[arg(long, value_name = "ID", conflicts_with_all = ["cmd", "user", "cwd", "grace", "env"])]
    pub attach: Option<String>,
    /// The program and its arguments (default: the user's login shell).
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    pub cmd: Vec<String>,
}

pub async fn run(client: &Client, args: ShellArgs) -> anyhow::Result<u8> {
    // A shell fed from a pipe may start after the piped bytes, and its end, were sent: it
    // then waits forever for input. Refused before anything starts in the box.
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "stdin is not a terminal: `berth shell` and `berth exec -it` need one; \
             to run a command with piped input use `berth exec {} -- CMD`",
            args.name
        );
    }
    let size = window_size().unwrap_or_default();
    let socket = client.websocket(&pty_path(&args, size)).await?;
    let raw = RawMode::enter().context("cannot put the terminal in raw mode")?;
    let ending = attached(socket, size).await;
    drop(raw);
    match ending? {
        Ending::Exited(code) => Ok(u8::try_from(code & 0xff).unwrap_or(1)),
        Ending::Lost { id } => {
            let hint = id
                .map(|id| {
                    format!(
                        "; the terminal lives on in the box for its grace period: berth shell {} --attach {id}",
                        args.name
                    )
                })
                .unwrap_or_default();
            eprintln!("berth: the connection to the terminal ended{hint}");
            Ok(EXIT_CONNECTION_LOST)
        }
        Ending::TakenOver { reason } => {
            eprintln!("berth: {reason}");
            Ok(EXIT_CONNECTION_LOST)
        }
    }
}

/// How an attachment ended.
enum Ending {
    Exited(i32),
    /// The connection ended first.
    Lost {
        id: Option<String>,
    },
    /// Another client attached to the terminal.
    TakenOver {
        reason: String,
    },
}

fn pty_path(args: &ShellArgs, size: TerminalSize) -> String {
    let mut query = vec![format!("cols={}", size.cols), format!("rows={}", size.rows)];
    match &args.attach {
        Some(id) => query.push(format!("id={}", query_value(id))),
        None => {
            query.extend(args.cmd.iter().map(|a| format!("cmd={}", query_value(a))));
            let user = berth_protocol::guest::BoxUser::from(args.user);
            query.push(format!("user={}", user.as_str()));
            if let Some(cwd) = &args.cwd {
                query.push(format!("cwd={}", query_value(cwd)));
            }
            query.extend(
                args.env
                    .iter()
                    .map(|(k, v)| format!("env={}", query_value(&format!("{k}={v}")))),
            );
            if let Some(grace) = args.grace {
                query.push(format!("grace_s={grace}"));
            }
            if let Some(term) = std::env::var("TERM").ok().filter(|t| !t.is_empty()) {
                query.push(format!("term={}", query_value(&term)));
            }
        }
    }
    format!(
        "/v1/boxes/{}/pty?{}",
        path_segment(&args.name),
        query.join("&")
    )
}

/// Copies between the local terminal and the WebSocket until the program ends, the
/// connection drops, or berth is told to end (SIGTERM, SIGHUP).
async fn attached(
    socket: tokio_tungstenite::WebSocketStream<crate::connector::DaemonStream>,
    mut size: TerminalSize,
) -> anyhow::Result<Ending> {
    let (mut to_box, mut from_box) = socket.split();
    let mut keys = stdin_reader();
    let mut winch = signal(SignalKind::window_change())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut id = None;
    let mut stdin_open = true;
    let mut stdout = std::io::stdout();
    loop {
        tokio::select! {
            message = from_box.next() => match message {
                Some(Ok(Message::Binary(bytes))) => {
                    stdout.write_all(&bytes)?;
                    stdout.flush()?;
                }
                Some(Ok(Message::Text(text))) => match serde_json::from_str(text.as_str()) {
                    Ok(ServerControl::Hello { id: hello, .. }) => id = Some(hello),
                    Ok(ServerControl::Exit { exit }) => return Ok(Ending::Exited(exit.code)),
                    Ok(ServerControl::Detached { detached }) => {
                        return Ok(Ending::TakenOver { reason: detached.reason })
                    }
                    Ok(ServerControl::Error { error }) => {
                        anyhow::bail!("{} ({})", error.message, error.code)
                    }
                    Err(_) => {}
                },
                Some(Ok(_)) => {}
                None | Some(Err(_)) => return Ok(Ending::Lost { id }),
            },
            key = keys.recv(), if stdin_open => {
                // The end of a piped stdin is ^D, once: a shell at its prompt ends on it.
                let bytes = key.unwrap_or_else(|| {
                    stdin_open = false;
                    vec![END_OF_TRANSMISSION]
                });
                if to_box.send(Message::Binary(bytes.into())).await.is_err() {
                    return Ok(Ending::Lost { id });
                }
            }
            _ = winch.recv() => {
                if let Some(now) = window_size().filter(|now| *now != size) {
                    size = now;
                    let resize = serde_json::to_string(&ClientControl::Resize(now))?;
                    let _ = to_box.send(Message::Text(resize.into())).await;
                }
            }
            _ = term.recv() => return Ok(Ending::Lost { id }),
            _ = hangup.recv() => return Ok(Ending::Lost { id }),
        }
    }
}

/// berth's stdin, read on a thread of its own (a blocking read cannot be cancelled); the
/// channel closes at its end.
fn stdin_reader() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(4);
    std::thread::spawn(move || {
        use std::io::Read as _;
        let mut stdin = std::io::stdin();
        let mut buf = vec![0u8; 8192];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}
