//! `berth desktop …`: computer use on a box with a desktop (`--template desktop`): its
//! status, a screenshot, pointer and keyboard actions, the pointer's place, and the screen
//! for a VNC viewer (`cmd_desktop_vnc.rs`; docs/desktop.md). Each call wakes the box and waits for its desktop.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use clap::Subcommand;
use http::Method;
use http_body_util::BodyExt as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::args::box_path;
use crate::client::{empty, Client};
use crate::output;

const ACTIONS_HELP: &str = "\
Each ACTION_JSON is one JSON object, by its \"type\" (docs/desktop.md):
  {\"type\":\"move\",\"x\":100,\"y\":200}
  {\"type\":\"click\",\"x\":100,\"y\":200}                           button left|right|middle; count 1-3
  {\"type\":\"double_click\"}  {\"type\":\"triple_click\"}           at x,y when given
  {\"type\":\"mouse_down\"}  {\"type\":\"mouse_up\"}                 button
  {\"type\":\"drag\",\"from\":{\"x\":1,\"y\":1},\"to\":{\"x\":90,\"y\":60}}
  {\"type\":\"scroll\",\"direction\":\"down\",\"amount\":5}            up|down|left|right; at x,y when given
  {\"type\":\"type\",\"text\":\"hello\"}
  {\"type\":\"key\",\"keys\":\"ctrl+s\"}                             X keysyms, or enter, esc, cmd, …
  {\"type\":\"hold_key\",\"keys\":\"shift\",\"ms\":500}
  {\"type\":\"wait\",\"ms\":1000}
They run in order, at most 100; the first that fails stops the rest. Prints the daemon's \
answer as JSON: where the pointer is after the last, {\"cursor\":{\"x\":…,\"y\":…}}.

Examples:
  berth desktop do alice '{\"type\":\"click\",\"x\":40,\"y\":60}' '{\"type\":\"type\",\"text\":\"hi\"}'
  echo '[{\"type\":\"key\",\"keys\":\"enter\"}]' | berth desktop do alice -";

#[derive(Debug, Subcommand)]
pub enum DesktopCommand {
    /// Print a box's display, screen size, and whether its desktop is ready (and how long
    /// after the box's boot began it was). Wakes the box, and waits up to 300 s for its
    /// services to settle.
    Status {
        /// The box's name or id (`bx_…`); its template must have a desktop.
        name: String,
        /// Print the daemon's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Save a PNG of a box's whole screen (wakes the box).
    Screenshot {
        /// The box's name or id (`bx_…`).
        name: String,
        /// Where to write the PNG; `-`: stdout.
        #[arg(short, long, value_name = "FILE.png")]
        output: PathBuf,
        /// Draw the mouse pointer into the picture.
        #[arg(long)]
        cursor: bool,
    },
    /// Run pointer and keyboard actions on a box's desktop, in order (wakes the box), and
    /// print the daemon's answer as JSON: where the pointer is after the last.
    #[command(after_help = ACTIONS_HELP)]
    Do {
        /// The box's name or id (`bx_…`).
        name: String,
        /// One JSON object each; or `-` alone: a JSON array of them from stdin.
        #[arg(value_name = "ACTION_JSON", required = true)]
        actions: Vec<String>,
    },
    /// Print where the mouse pointer is on a box's desktop: `X Y` (wakes the box).
    Cursor {
        /// The box's name or id (`bx_…`).
        name: String,
        /// Print the daemon's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve a box's desktop to a VNC viewer on this machine until Ctrl-C: each viewer
    /// that connects to the local port is carried to the box's VNC server (wakes the box).
    /// Watching does not keep the box awake; what you type and click does.
    Vnc {
        /// The box's name or id (`bx_…`).
        name: String,
        /// The local address to listen on; a loopback one only (the desktop asks no
        /// password). Port 0: any free port, printed.
        #[arg(long, value_name = "ADDR:PORT", default_value = crate::cmd_desktop_vnc::DEFAULT_LISTEN)]
        listen: std::net::SocketAddr,
    },
}

/// `GET …/desktop`, leniently: a newer daemon may say more.
#[derive(Debug, Serialize, Deserialize)]
struct Status {
    display: String,
    width: u32,
    height: u32,
    ready: bool,
    #[serde(default)]
    ready_after_ms: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Cursor {
    x: u32,
    y: u32,
}

#[derive(Debug, Serialize, Deserialize)]
struct Done {
    cursor: Cursor,
}

pub async fn run(client: &Client, command: DesktopCommand) -> anyhow::Result<u8> {
    match command {
        DesktopCommand::Status { name, json } => {
            let status: Status = client
                .json(
                    Method::GET,
                    &box_path(&name, "/desktop"),
                    None::<&()>,
                    "desktop status",
                )
                .await?;
            if json {
                output::json(&mut std::io::stdout().lock(), &status)?;
            } else {
                print!("{}", status_text(&status));
            }
        }
        DesktopCommand::Screenshot {
            name,
            output,
            cursor,
        } => screenshot(client, &name, &output, cursor).await?,
        DesktopCommand::Do { name, actions } => {
            let actions = parse_actions(&actions, || {
                let mut text = String::new();
                std::io::stdin()
                    .read_to_string(&mut text)
                    .context("reading the actions from stdin")?;
                Ok(text)
            })?;
            let done: Done = client
                .json(
                    Method::POST,
                    &box_path(&name, "/desktop/actions"),
                    Some(&serde_json::json!({ "actions": actions })),
                    "the actions' answer",
                )
                .await?;
            output::json(&mut std::io::stdout().lock(), &done)?;
        }
        DesktopCommand::Vnc { name, listen } => {
            return crate::cmd_desktop_vnc::run(client, &name, listen).await
        }
        DesktopCommand::Cursor { name, json } => {
            let cursor: Cursor = client
                .json(
                    Method::GET,
                    &box_path(&name, "/desktop/cursor"),
                    None::<&()>,
                    "the pointer",
                )
                .await?;
            if json {
                output::json(&mut std::io::stdout().lock(), &cursor)?;
            } else {
                println!("{} {}", cursor.x, cursor.y);
            }
        }
    }
    Ok(0)
}

async fn screenshot(client: &Client, name: &str, dest: &Path, cursor: bool) -> anyhow::Result<()> {
    let path = format!("{}?cursor={cursor}", box_path(name, "/desktop/screenshot"));
    let response = client
        .send(Method::GET, &path, "image/png", None, None, empty())
        .await?;
    const READ: &str = "reading the screenshot from the daemon";
    if dest == Path::new("-") {
        let mut body = response.into_body();
        let mut out = std::io::stdout().lock();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.context(READ)?.into_data() {
                out.write_all(&data).context("writing to stdout")?;
            }
        }
        return out.flush().context("writing to stdout");
    }
    crate::cmd_cp::save(response.into_body(), dest, READ, |_| {}).await
}

/// The actions: each argument one JSON object, or `-` alone for a JSON array on stdin.
fn parse_actions(
    args: &[String],
    stdin: impl FnOnce() -> anyhow::Result<String>,
) -> anyhow::Result<Vec<Value>> {
    if args.iter().any(|a| a == "-") {
        if args.len() > 1 {
            bail!("`-` (the actions as a JSON array on stdin) goes alone, without other actions");
        }
        let text = stdin()?;
        let value: Value =
            serde_json::from_str(&text).context("the actions on stdin are not JSON")?;
        let Value::Array(actions) = value else {
            bail!("the actions on stdin must be a JSON array of action objects");
        };
        return Ok(actions);
    }
    args.iter()
        .enumerate()
        .map(|(i, arg)| match serde_json::from_str::<Value>(arg) {
            Ok(action @ Value::Object(_)) => Ok(action),
            Ok(_) => bail!("action {} is not a JSON object: {arg}", i + 1),
            Err(e) => bail!("action {} is not JSON ({e}): {arg}", i + 1),
        })
        .collect()
}

fn status_text(status: &Status) -> String {
    let ready = match (status.ready, status.ready_after_ms) {
        (true, Some(ms)) => format!("yes, {:.1} s after the boot began", ms as f64 / 1000.0),
        (true, None) => "yes".to_owned(),
        (false, _) => {
            "no: a desktop service is not running (`berth service ls` shows which)".to_owned()
        }
    };
    format!(
        "display  {}\nscreen   {}x{}\nready    {ready}\n",
        status.display, status.width, status.height
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| (*v).to_owned()).collect()
    }

    fn no_stdin() -> anyhow::Result<String> {
        panic!("stdin read")
    }

    #[test]
    fn each_argument_is_one_action_object() {
        let actions = parse_actions(
            &args(&[
                r#"{"type":"click","x":1,"y":2}"#,
                r#"{"type":"wait","ms":5}"#,
            ]),
            no_stdin,
        )
        .unwrap();
        assert_eq!(actions.len(), 2);
        assert_eq!(actions[1]["ms"], 5);
        let not_json = parse_actions(&args(&["click"]), no_stdin).unwrap_err();
        assert!(
            not_json.to_string().starts_with("action 1 is not JSON"),
            "{not_json}"
        );
        let array = parse_actions(&args(&["{}", "[]"]), no_stdin).unwrap_err();
        assert_eq!(array.to_string(), "action 2 is not a JSON object: []");
    }

    #[test]
    fn a_dash_reads_an_array_from_stdin_alone() {
        let actions = parse_actions(&args(&["-"]), || {
            Ok(r#"[{"type":"key","keys":"enter"}]"#.to_owned())
        })
        .unwrap();
        assert_eq!(actions[0]["keys"], "enter");
        assert!(parse_actions(&args(&["-"]), || Ok("{}".to_owned())).is_err());
        assert!(parse_actions(&args(&["-", "{}"]), no_stdin).is_err());
    }

    #[test]
    fn every_desktop_command_parses() {
        use clap::Parser as _;
        for line in [
            &["berth", "desktop", "status", "alice", "--json"][..],
            &[
                "berth",
                "desktop",
                "screenshot",
                "alice",
                "-o",
                "s.png",
                "--cursor",
            ],
            &["berth", "desktop", "screenshot", "alice", "--output", "-"],
            &[
                "berth",
                "desktop",
                "do",
                "alice",
                r#"{"type":"click"}"#,
                "{}",
            ],
            &["berth", "desktop", "do", "alice", "-"],
            &["berth", "desktop", "cursor", "alice"],
        ] {
            crate::Cli::try_parse_from(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        }
        for wrong in [
            &["berth", "desktop", "do", "alice"][..],
            &["berth", "desktop", "screenshot", "alice"],
        ] {
            assert!(crate::Cli::try_parse_from(wrong).is_err(), "{wrong:?}");
        }
    }

    #[test]
    fn the_status_reads_as_lines() {
        let status = Status {
            display: ":0".into(),
            width: 1024,
            height: 768,
            ready: true,
            ready_after_ms: Some(12_345),
        };
        assert_eq!(
            status_text(&status),
            "display  :0\nscreen   1024x768\nready    yes, 12.3 s after the boot began\n"
        );
        let down = Status {
            ready: false,
            ready_after_ms: None,
            ..status
        };
        assert!(status_text(&down).contains("ready    no"));
    }
}
