//! `berth egress NAME`: the box's egress audit log, one decision per line.

use std::io::Write as _;

use anyhow::Context as _;
use clap::Args;
use http::Method;
use serde::Deserialize;

use crate::args::box_path;
use crate::client::Client;
use crate::table::table;

/// Records asked for per call (the daemon's maximum).
const PAGE: usize = 1000;

#[derive(Debug, Args)]
#[command(after_help = "\
Each line is one decision of the egress gateway: an allowed connection (written when it \
ends, with the bytes each way) or a refusal with its reason (not_allowed, port, \
forbidden_address:loopback, sni_mismatch, too_many_connections, encoded_response, …). \
`withheld RULE: method|path|path_ambiguous`: the request carried the rule's placeholder \
outside its methods or paths, so no secret was set. `closed: idle`: the gateway closed a \
silent relay. Reads across the log's rotated files; records rotated away are skipped. \
See docs/security.md.")]
pub struct EgressArgs {
    /// The box's name or id (`bx_…`).
    pub name: String,
    /// Skip this many records (default: from the first).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub after: u64,
    /// Print each record as the daemon's JSON, one per line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Deserialize)]
struct AuditPage {
    records: Vec<serde_json::Value>,
    next: u64,
}

pub async fn run(client: &Client, args: EgressArgs) -> anyhow::Result<u8> {
    let mut records = Vec::new();
    let mut after = args.after;
    loop {
        let path = box_path(&args.name, &format!("/egress?after={after}&limit={PAGE}"));
        let page: AuditPage = client
            .json(Method::GET, &path, None::<&()>, "an egress audit page")
            .await?;
        let full = page.records.len() == PAGE;
        records.extend(page.records);
        if !full || page.next <= after {
            break;
        }
        after = page.next;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        for record in &records {
            writeln!(out, "{record}")?;
        }
    } else {
        let rows: Vec<Vec<String>> = records.iter().map(row).collect();
        write!(
            out,
            "{}",
            table(
                &["TIME", "DECISION", "TARGET", "VIA", "RESOLVED", "UP", "DOWN", "REASON"],
                &rows
            )
        )?;
    }
    out.flush().context("writing to stdout")?;
    Ok(0)
}

fn text_of(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => "-".to_owned(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn row(record: &serde_json::Value) -> Vec<String> {
    let text = |key: &str| text_of(&record[key]);
    let target = match (&record["target"], &record["port"]) {
        (serde_json::Value::String(host), serde_json::Value::Number(port)) => {
            format!("{host}:{port}")
        }
        _ => text("target"),
    };
    let mut reason = text("reason");
    if let Some(rule) = record["credential"].as_str() {
        reason = format!("credential {rule}");
    } else if let Some(rule) = record["withheld"]["rule"].as_str() {
        reason = format!(
            "withheld {rule}: {}",
            text_of(&record["withheld"]["reason"])
        );
    } else if record["intercept"] == true && reason == "-" {
        reason = "intercepted".to_owned();
    }
    if let Some(closed) = record["closed"].as_str() {
        reason = format!("{reason}, closed: {closed}");
    }
    if record["decision"] == "dropped" {
        reason = format!("{} lines dropped (audit queue full)", text("dropped"));
    }
    vec![
        text("time"),
        text("decision"),
        target,
        text("via"),
        text("resolved"),
        text("bytes_up"),
        text("bytes_down"),
        reason,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_show_the_target_and_why() {
        let deny = serde_json::json!({"time": "t", "decision": "deny", "target": "evil.test",
            "port": 443, "via": "connect", "resolved": null, "reason": "not_allowed",
            "bytes_up": 0, "bytes_down": 0});
        assert_eq!(
            row(&deny),
            [
                "t",
                "deny",
                "evil.test:443",
                "connect",
                "-",
                "0",
                "0",
                "not_allowed"
            ]
        );
        let allow = serde_json::json!({"time": "t", "decision": "allow", "target": "a.test",
            "port": 443, "via": "direct", "resolved": "127.0.0.1:8443", "reason": null,
            "bytes_up": 10, "bytes_down": 20, "intercept": true, "credential": "anthropic"});
        assert_eq!(row(&allow)[7], "credential anthropic");
        let withheld = serde_json::json!({"decision": "allow", "intercept": true,
            "withheld": {"rule": "anthropic", "reason": "path_ambiguous"}, "closed": "idle"});
        assert_eq!(
            row(&withheld)[7],
            "withheld anthropic: path_ambiguous, closed: idle"
        );
        let dropped = serde_json::json!({"decision": "dropped", "dropped": 12});
        assert_eq!(row(&dropped)[7], "12 lines dropped (audit queue full)");
    }
}
