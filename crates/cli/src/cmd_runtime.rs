//! `berth runtime ls`: the runtimes the daemon can run boxes on, and why one cannot.

use std::io::Write as _;

use anyhow::Context as _;
use clap::Subcommand;
use http::Method;
use serde::Deserialize;

use crate::client::Client;
use crate::table::table;

#[derive(Debug, Subcommand)]
pub enum RuntimeCommand {
    /// List runtimes as a table (NAME, AVAILABLE, DEFAULT, DETAIL: the accelerator, or why
    /// the runtime is unavailable).
    #[command(visible_alias = "list")]
    Ls {
        /// Print the daemon's raw JSON answer (with each runtime's details) instead.
        #[arg(long)]
        json: bool,
    },
}

/// What we read of a runtime. Lenient: the API may add fields.
#[derive(Debug, Deserialize)]
struct RuntimeView {
    name: String,
    #[serde(default)]
    available: bool,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    default: bool,
    #[serde(default)]
    details: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct RuntimeList {
    runtimes: Vec<RuntimeView>,
}

pub async fn run(client: &Client, command: RuntimeCommand) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    let RuntimeCommand::Ls { json } = command;
    if json {
        let raw: serde_json::Value = client
            .json(Method::GET, "/v1/runtimes", None::<&()>, "a runtime list")
            .await?;
        writeln!(out, "{}", serde_json::to_string_pretty(&raw)?)?;
    } else {
        let list: RuntimeList = client
            .json(Method::GET, "/v1/runtimes", None::<&()>, "a runtime list")
            .await?;
        out.write_all(runtime_table(&list.runtimes).as_bytes())?;
    }
    out.flush().context("writing to stdout")?;
    Ok(0)
}

fn runtime_table(runtimes: &[RuntimeView]) -> String {
    let rows: Vec<Vec<String>> = runtimes
        .iter()
        .map(|r| {
            let detail = match (&r.reason, &r.details) {
                (Some(reason), _) => reason.clone(),
                (None, Some(details)) => accel(details).unwrap_or_default(),
                (None, None) => String::new(),
            };
            vec![
                r.name.clone(),
                if r.available { "yes" } else { "no" }.into(),
                if r.default { "*" } else { "" }.into(),
                detail,
            ]
        })
        .collect();
    table(&["NAME", "AVAILABLE", "DEFAULT", "DETAIL"], &rows)
}

/// `accel kvm (reason)` from qemu's details.
fn accel(details: &serde_json::Value) -> Option<String> {
    let accel = &details["accel"];
    Some(format!(
        "accel {} ({})",
        accel["accel"].as_str()?,
        accel["reason"].as_str().unwrap_or("")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_the_reason_or_the_accelerator() {
        let list: RuntimeList = serde_json::from_value(serde_json::json!({"runtimes":[
            {"name":"sandbox","available":true,"reason":null,"default":true,"details":null},
            {"name":"qemu","available":true,"reason":null,"default":false,
             "details":{"accel":{"accel":"tcg","reason":"/dev/kvm cannot be opened"}}},
            {"name":"firecracker","available":false,"reason":"run `berth image build`","default":false}
        ]}))
        .unwrap();
        let text = runtime_table(&list.runtimes);
        assert!(
            text.contains("accel tcg (/dev/kvm cannot be opened)"),
            "{text}"
        );
        assert!(text.contains("run `berth image build`"), "{text}");
        let sandbox = text.lines().find(|l| l.starts_with("sandbox")).unwrap();
        assert!(sandbox.contains('*'), "{text}");
    }
}
