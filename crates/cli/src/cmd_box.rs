//! `berth box …`: create, list, show, start, stop and remove boxes.

use std::io::Write;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use http::Method;
use serde::{Deserialize, Serialize};

use crate::client::{path_segment, Client};

#[derive(Debug, Subcommand)]
pub enum BoxCommand {
    /// Create a box (stopped; it starts on `berth box start` or on first use) and print its id.
    Create(CreateArgs),
    /// List boxes as a table (NAME, ID, STATE, TEMPLATE, CREATED).
    #[command(visible_alias = "list")]
    Ls {
        /// Print the daemon's raw JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print one box as JSON.
    Show {
        /// The box's name or id (`bx_…`).
        name: String,
    },
    /// Start a box and wait until it is running.
    Start {
        /// The box's name or id (`bx_…`).
        name: String,
        /// Move the (stopped) box to this runtime first (sandbox, qemu, firecracker); its
        /// volume goes with it.
        #[arg(long, value_name = "R")]
        runtime: Option<String>,
    },
    /// Stop a box: every process in it ends; its files stay.
    Stop {
        /// The box's name or id (`bx_…`).
        name: String,
    },
    /// Delete a box: stop it and delete its volume (all its files). Cannot be undone.
    #[command(visible_alias = "delete")]
    Rm {
        /// The box's name or id (`bx_…`).
        name: String,
    },
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The box's name: a DNS label (1-63 of a-z, 0-9, '-'; not starting or ending with '-').
    /// It is also the box's hostname.
    pub name: String,
    /// The template to build the box from (the daemon's default is `host`).
    #[arg(long, value_name = "T")]
    pub template: Option<String>,
    /// Memory limit in MiB, 64-65536 (the daemon's default is 512).
    #[arg(long, value_name = "N")]
    pub memory_mib: Option<u64>,
    /// Most processes and threads at once, 16-65536 (the daemon's default is 256).
    #[arg(long, value_name = "N")]
    pub pids: Option<u64>,
    /// CPU share in cores, 0.1-256 (the daemon's default is 1.0).
    #[arg(long, value_name = "F")]
    pub cpus: Option<f64>,
    /// Seconds without a message, exec, file call or open stream before the box is
    /// reclaimed (stopped, files kept); the template's by default.
    #[arg(long, value_name = "S")]
    pub idle_timeout: Option<u64>,
    /// A host the box may reach on port 443: an exact name or a `*.suffix` wildcard
    /// (repeatable). Gives the box its own egress policy of just these hosts, replacing the
    /// template's whole, credential rules included (rules: templates or the API only).
    /// Without it, the box uses its template's policy.
    #[arg(long = "allow", value_name = "HOST")]
    pub allow: Vec<String>,
    /// The runtime the box runs on for its life: sandbox or qemu (`berth runtime ls`);
    /// the daemon's default (`berth up --runtime`) when absent.
    #[arg(long, value_name = "R")]
    pub runtime: Option<String>,
    /// The box's volume size in MiB, 64-1048576; its template's by default (1024 unless the
    /// template says).
    #[arg(long, value_name = "N")]
    pub disk_mib: Option<u64>,
}

/// Body of `POST /v1/boxes`. Absent fields are left out: the daemon applies its defaults.
#[derive(Debug, Serialize, PartialEq)]
struct CreateBody<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    template: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limits: Option<LimitsBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    idle_timeout_s: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    egress: Option<EgressBody<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disk_mib: Option<u64>,
}

/// The box's own egress policy: an allowlist and no credential rules.
#[derive(Debug, Serialize, PartialEq)]
struct EgressBody<'a> {
    allow: &'a [String],
}

#[derive(Debug, Serialize, PartialEq)]
struct LimitsBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_mib: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pids: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpus: Option<f64>,
}

impl CreateArgs {
    fn body(&self) -> CreateBody<'_> {
        let limits = (self.memory_mib.is_some() || self.pids.is_some() || self.cpus.is_some())
            .then_some(LimitsBody {
                memory_mib: self.memory_mib,
                pids: self.pids,
                cpus: self.cpus,
            });
        CreateBody {
            name: &self.name,
            template: self.template.as_deref(),
            limits,
            idle_timeout_s: self.idle_timeout,
            egress: (!self.allow.is_empty()).then_some(EgressBody { allow: &self.allow }),
            runtime: self.runtime.as_deref(),
            disk_mib: self.disk_mib,
        }
    }
}

/// What we read of a box. Lenient: the API may add fields, and we only show these.
#[derive(Debug, Deserialize)]
pub struct BoxView {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub template: String,
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub created_at: String,
    #[serde(default)]
    pub state_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct BoxListView {
    boxes: Vec<BoxView>,
}

pub async fn run(client: &Client, command: BoxCommand) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match command {
        BoxCommand::Create(args) => {
            let created: BoxView = client
                .json(Method::POST, "/v1/boxes", Some(&args.body()), "a box")
                .await?;
            writeln!(out, "{}", created.id)?;
        }
        BoxCommand::Ls { json } => {
            if json {
                let raw: serde_json::Value = client
                    .json(Method::GET, "/v1/boxes", None::<&()>, "a box list")
                    .await?;
                writeln!(out, "{}", serde_json::to_string_pretty(&raw)?)?;
            } else {
                let list: BoxListView = client
                    .json(Method::GET, "/v1/boxes", None::<&()>, "a box list")
                    .await?;
                out.write_all(table(&list.boxes).as_bytes())?;
            }
        }
        BoxCommand::Show { name } => {
            let raw: serde_json::Value = client
                .json(Method::GET, &box_path(&name, ""), None::<&()>, "a box")
                .await?;
            writeln!(out, "{}", serde_json::to_string_pretty(&raw)?)?;
        }
        BoxCommand::Start { name, runtime } => {
            let body = runtime.map(|r| serde_json::json!({ "runtime": r }));
            let view: BoxView = client
                .json(
                    Method::POST,
                    &box_path(&name, "/start"),
                    body.as_ref(),
                    "a box",
                )
                .await?;
            writeln!(out, "{}", summary(&view))?;
        }
        BoxCommand::Stop { name } => {
            let view: BoxView = client
                .json(
                    Method::POST,
                    &box_path(&name, "/stop"),
                    None::<&()>,
                    "a box",
                )
                .await?;
            writeln!(out, "{}", summary(&view))?;
        }
        BoxCommand::Rm { name } => {
            client
                .no_content(Method::DELETE, &box_path(&name, ""), None::<&()>)
                .await?;
            writeln!(out, "removed {name}")?;
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(())
}

/// `/v1/boxes/{ref}{suffix}`.
pub fn box_path(name: &str, suffix: &str) -> String {
    format!("/v1/boxes/{}{suffix}", path_segment(name))
}

/// `alice (bx_…): running`, plus the reason when the daemon gives one.
fn summary(view: &BoxView) -> String {
    let mut line = format!("{} ({}): {}", view.name, view.id, view.state);
    if let Some(reason) = view.state_reason.as_deref().filter(|r| !r.is_empty()) {
        line.push_str(&format!(" ({reason})"));
    }
    line
}

fn table(boxes: &[BoxView]) -> String {
    let rows: Vec<Vec<String>> = boxes
        .iter()
        .map(|b| {
            vec![
                b.name.clone(),
                b.id.clone(),
                b.state.clone(),
                b.template.clone(),
                b.created_at.clone(),
            ]
        })
        .collect();
    crate::table::table(&["NAME", "ID", "STATE", "TEMPLATE", "CREATED"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_body_leaves_defaults_to_the_daemon() {
        let args = CreateArgs {
            name: "a".into(),
            template: None,
            memory_mib: None,
            pids: None,
            cpus: None,
            idle_timeout: None,
            allow: Vec::new(),
            runtime: None,
            disk_mib: None,
        };
        assert_eq!(
            serde_json::to_value(args.body()).unwrap(),
            serde_json::json!({"name":"a"})
        );
        let args = CreateArgs {
            name: "a".into(),
            template: Some("host".into()),
            memory_mib: Some(256),
            pids: None,
            cpus: Some(0.5),
            idle_timeout: Some(30),
            allow: vec!["api.anthropic.com".into(), "*.github.com".into()],
            runtime: Some("qemu".into()),
            disk_mib: Some(2048),
        };
        assert_eq!(
            serde_json::to_value(args.body()).unwrap(),
            serde_json::json!({"name":"a","template":"host","limits":{"memory_mib":256,"cpus":0.5},"idle_timeout_s":30,"egress":{"allow":["api.anthropic.com","*.github.com"]},"runtime":"qemu","disk_mib":2048})
        );
    }

    #[test]
    fn allow_is_repeatable_and_becomes_the_box_egress() {
        use clap::Parser as _;
        let cli = crate::Cli::try_parse_from([
            "berth",
            "box",
            "create",
            "a",
            "--allow",
            "api.anthropic.com",
            "--allow",
            "*.github.com",
        ])
        .unwrap();
        let crate::Command::Box(BoxCommand::Create(args)) = cli.command else {
            panic!("not box create: {:?}", cli.command);
        };
        assert_eq!(
            serde_json::to_value(args.body()).unwrap()["egress"],
            serde_json::json!({"allow":["api.anthropic.com","*.github.com"]})
        );
    }

    #[test]
    fn table_aligns_columns() {
        let boxes: BoxListView = serde_json::from_value(serde_json::json!({"boxes":[
            {"id":"bx_1","name":"alice","template":"host","state":"running","created_at":"2026-11-29T22:00:00Z","extra":1},
            {"id":"bx_22","name":"b","template":"host","state":"stopped","created_at":"2026-11-29T22:01:00Z"}
        ]}))
        .unwrap();
        let text = table(&boxes.boxes);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "NAME    ID      STATE     TEMPLATE   CREATED");
        assert_eq!(
            lines[1],
            "alice   bx_1    running   host       2026-11-29T22:00:00Z"
        );
        assert_eq!(
            lines[2],
            "b       bx_22   stopped   host       2026-11-29T22:01:00Z"
        );
    }

    #[test]
    fn box_paths_escape_the_reference() {
        assert_eq!(box_path("alice", "/start"), "/v1/boxes/alice/start");
        assert_eq!(box_path("a/b", ""), "/v1/boxes/a%2Fb");
    }
}
