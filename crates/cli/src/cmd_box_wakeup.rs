//! `berth box wakeup add|ls|rm`: messages scheduled for a box (`/v1/boxes/{ref}/wakeups`).

use std::io::Write;

use anyhow::Context;
use clap::{ArgGroup, Args, Subcommand};
use http::Method;
use serde::{Deserialize, Serialize};

use crate::args::{box_path, parse_duration_s};
use crate::client::Client;
use crate::output;
use crate::table::table;

#[derive(Debug, Subcommand)]
pub enum WakeupCommand {
    /// Schedule MESSAGE to the box: once (--at, --in) or at every match of --cron. It
    /// wakes the box if it sleeps. Prints the wakeup's id and its next slot.
    Add(AddArgs),
    /// List the box's pending wakeups, soonest first (ID, NEXT, KIND, BY, FIRED, SKIPPED,
    /// MESSAGE). SKIPPED counts slots of the box's own wakeups not fired because the box
    /// was past `[wakeups] box_max_per_hour`.
    #[command(visible_alias = "list")]
    Ls {
        /// The box's name or id (`bx_…`).
        name: String,
        /// Print the daemon's raw JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a wakeup: its slots not yet fired never fire.
    #[command(visible_alias = "delete")]
    Rm {
        /// The box's name or id (`bx_…`).
        name: String,
        /// The wakeup's id (`wk_…`).
        id: String,
        /// Print the daemon's JSON answer (the wakeup as it was) instead of a sentence.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("when").required(true).args(["at", "in_s", "cron"])))]
pub struct AddArgs {
    /// The box's name or id (`bx_…`).
    pub name: String,
    /// The message, as one argument or several (joined with spaces).
    #[arg(required = true, num_args = 1..)]
    pub message: Vec<String>,
    /// Once, at this RFC 3339 time (e.g. 2026-12-02T09:00:00+01:00).
    #[arg(long, value_name = "TIME")]
    pub at: Option<String>,
    /// Once, this long from now: seconds, or 90s, 30m, 2h, 1d.
    #[arg(long = "in", value_name = "DURATION", value_parser = parse_duration_s)]
    pub in_s: Option<u64>,
    /// At every match of this 5-field cron expression (minute hour day month weekday).
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// The IANA time zone --cron is read in (default UTC).
    #[arg(long, value_name = "ZONE", requires = "cron")]
    pub tz: Option<String>,
    /// Print the daemon's JSON answer (the new wakeup) instead of a summary.
    #[arg(long)]
    pub json: bool,
}

/// Body of `POST /v1/boxes/{ref}/wakeups`.
#[derive(Debug, Serialize)]
struct AddBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    in_s: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cron: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tz: Option<&'a str>,
    message: String,
}

/// What we read of a wakeup. Lenient: the API may add fields.
#[derive(Debug, Deserialize)]
struct WakeupView {
    id: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    cron: Option<String>,
    #[serde(default)]
    tz: Option<String>,
    #[serde(default)]
    next_due_at: String,
    #[serde(default)]
    created_by: String,
    #[serde(default)]
    fired: u64,
    /// Absent from a daemon older than it.
    #[serde(default)]
    skipped: u64,
}

#[derive(Debug, Deserialize)]
struct WakeupList {
    wakeups: Vec<WakeupView>,
}

pub async fn run(client: &Client, command: WakeupCommand) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match command {
        WakeupCommand::Add(args) => {
            let body = AddBody {
                at: args.at.as_deref(),
                in_s: args.in_s,
                cron: args.cron.as_deref(),
                tz: args.tz.as_deref(),
                message: args.message.join(" "),
            };
            let made: serde_json::Value = client
                .json(
                    Method::POST,
                    &box_path(&args.name, "/wakeups"),
                    Some(&body),
                    "a wakeup",
                )
                .await?;
            if args.json {
                output::json(&mut out, &made)?;
            } else {
                let made: WakeupView =
                    serde_json::from_value(made).context("bad wakeup from the daemon")?;
                writeln!(out, "{} next at {}", made.id, made.next_due_at)?;
            }
        }
        WakeupCommand::Ls { name, json } => {
            let raw: serde_json::Value = client
                .json(
                    Method::GET,
                    &box_path(&name, "/wakeups"),
                    None::<&()>,
                    "a wakeup list",
                )
                .await?;
            if json {
                output::json(&mut out, &raw)?;
            } else {
                let list: WakeupList =
                    serde_json::from_value(raw).context("bad wakeup list from the daemon")?;
                out.write_all(list_table(&list.wakeups).as_bytes())?;
            }
        }
        WakeupCommand::Rm { name, id, json } => {
            let gone: serde_json::Value = client
                .json(
                    Method::DELETE,
                    &box_path(&name, &format!("/wakeups/{id}")),
                    None::<&()>,
                    "a wakeup",
                )
                .await?;
            if json {
                output::json(&mut out, &gone)?;
            } else {
                writeln!(out, "cancelled {id}")?;
            }
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(())
}

fn list_table(wakeups: &[WakeupView]) -> String {
    let rows: Vec<Vec<String>> = wakeups
        .iter()
        .map(|w| {
            let kind = match (&w.cron, &w.tz) {
                (Some(cron), tz) => format!("cron {cron:?} {}", tz.as_deref().unwrap_or("UTC")),
                (None, _) => w.kind.clone(),
            };
            vec![
                w.id.clone(),
                w.next_due_at.clone(),
                kind,
                w.created_by.clone(),
                w.fired.to_string(),
                w.skipped.to_string(),
                w.message.clone(),
            ]
        })
        .collect();
    table(
        &["ID", "NEXT", "KIND", "BY", "FIRED", "SKIPPED", "MESSAGE"],
        &rows,
    )
}
