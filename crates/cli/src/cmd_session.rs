//! `berth session ls|revoke`: the browsers signed in to the web app as your tenant.

use std::io::Write as _;

use anyhow::Context as _;
use clap::Subcommand;
use http::Method;
use serde::Deserialize;

use crate::client::{path_segment, Client};
use crate::table::table;

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// List the signed-in browsers (ID, TENANT, DEVICE, CREATED, LAST USED, SIGNED IN WITH:
    /// pairing, the key's id, or unknown), most recently used first. A session unused for
    /// 30 days ends; a tenant keeps at most 100; revoking a key ends those it signed in, and
    /// the unknown ones.
    #[command(visible_alias = "list")]
    Ls {
        /// Print the daemon's raw JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Sign a browser out: its cookie stops working at once.
    #[command(visible_alias = "rm")]
    Revoke {
        /// The session's id (`ws_…`, from `berth session ls`).
        id: String,
    },
}

#[derive(Debug, Deserialize)]
struct SessionList {
    sessions: Vec<SessionView>,
}

#[derive(Debug, Deserialize)]
struct SessionView {
    id: String,
    tenant: String,
    device: String,
    created_at: String,
    last_used_at: String,
    /// Absent from a daemon older than it.
    #[serde(default)]
    opened_with: Option<String>,
    #[serde(default)]
    api_key_id: Option<String>,
}

impl SessionView {
    /// `pairing`, the key's id, or `unknown`.
    fn signed_in_with(&self) -> String {
        match (&self.api_key_id, &self.opened_with) {
            (Some(key), _) => key.clone(),
            (None, Some(origin)) => origin.clone(),
            (None, None) => "-".into(),
        }
    }
}

pub async fn run(client: &Client, command: SessionCommand) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    match command {
        SessionCommand::Ls { json } => {
            let raw: serde_json::Value = client
                .json(
                    Method::GET,
                    "/v1/web/sessions",
                    None::<&()>,
                    "a session list",
                )
                .await?;
            if json {
                crate::output::json(&mut out, &raw)?;
            } else {
                let list: SessionList = serde_json::from_value(raw)
                    .context("the daemon's answer is not a session list")?;
                out.write_all(session_table(&list.sessions).as_bytes())?;
            }
        }
        SessionCommand::Revoke { id } => {
            let path = format!("/v1/web/sessions/{}", path_segment(&id));
            client
                .no_content(Method::DELETE, &path, None::<&()>)
                .await?;
            writeln!(out, "session {id} revoked")?;
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(0)
}

fn session_table(sessions: &[SessionView]) -> String {
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            vec![
                s.id.clone(),
                s.tenant.clone(),
                s.device.clone(),
                s.created_at.clone(),
                s.last_used_at.clone(),
                s.signed_in_with(),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "TENANT",
            "DEVICE",
            "CREATED",
            "LAST USED",
            "SIGNED IN WITH",
        ],
        &rows,
    )
}
