//! `berth box …`: create, list, show, start, stop, pause, resume, snapshot, change
//! (`cmd_box_set.rs`) and remove boxes.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use http::Method;
use serde::{Deserialize, Serialize};

use crate::args::{box_path, parse_env, LimitsBody, SleepArgs, SleepBody};
use crate::client::{query_value, Client};
use crate::cmd_box_set::SetArgs;
use crate::output;

#[derive(Debug, Subcommand)]
pub enum BoxCommand {
    /// Create a box (stopped; it starts on `berth box start` or on first use; a box from a template's warm pool comes running) and print its id.
    Create(CreateArgs),
    /// List boxes as a table (NAME, ID, STATE, RUNTIME, TEMPLATE, CREATED, LABELS).
    #[command(visible_alias = "list")]
    Ls {
        /// Only boxes with this label (repeatable: every one must match).
        #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_env)]
        labels: Vec<(String, String)>,
        /// Only boxes in this state (stopped, starting, running, stopping, paused,
        /// snapshotted, failed).
        #[arg(long, value_name = "STATE")]
        state: Option<String>,
        /// Print the daemon's raw JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print one box as JSON (at a terminal, with a table of its last start's phases).
    Show {
        /// The box's name or id (`bx_…`).
        name: String,
        /// Print the JSON alone (also what a pipe gets); at a terminal the phases of the
        /// box's last start follow it as a table.
        #[arg(long)]
        json: bool,
    },
    /// Change a box's sleep ladder, limits, disk size, labels or env.
    Set(SetArgs),
    /// Start a box and wait until it is running and its services have started (at most 60 s).
    Start {
        /// The box's name or id (`bx_…`).
        name: String,
        /// Move the (stopped) box to this runtime first (sandbox, qemu, firecracker); its
        /// volume goes with it.
        #[arg(long, value_name = "R")]
        runtime: Option<String>,
        /// Print the daemon's JSON answer (the box) instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// Stop a box: every process in it ends; its files stay.
    Stop {
        /// The box's name or id (`bx_…`).
        name: String,
        /// Print the daemon's JSON answer (the box) instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// Pause a running box: every process frozen in memory (resumes in milliseconds).
    Pause {
        /// The box's name or id (`bx_…`).
        name: String,
        /// Print the daemon's JSON answer (the box) instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// Wake a paused or snapshotted box with its processes as they were.
    Resume {
        /// The box's name or id (`bx_…`).
        name: String,
        /// Print the daemon's JSON answer (the box) instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// Save a running or paused box's memory to disk and free it (VM runtimes); the next
    /// wake restores every process as it was.
    Snapshot {
        /// The box's name or id (`bx_…`).
        name: String,
        /// Print the daemon's JSON answer (the box) instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// Put a stopped box's volume back from a durable copy (`[storage] url`), for a volume
    /// image lost or damaged on its host: its newest copy, or `--generation N`. What the
    /// box wrote after that copy is lost (the box's `volume_restored` event says how long).
    /// Needs the admin key.
    Restore {
        /// The box's name or id (`bx_…`; a box of another tenant by its id).
        name: String,
        /// Restore from the box's durable copy (the only source there is; required, so the
        /// command says what it does).
        #[arg(long, required = true)]
        from_copy: bool,
        /// Which copy (`durable.generation` in `berth box show`); its newest by default.
        #[arg(long, value_name = "N")]
        generation: Option<u64>,
        /// Print the daemon's JSON answer (the box) instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// Messages scheduled for the box: add, ls, rm.
    #[command(subcommand)]
    Wakeup(crate::cmd_box_wakeup::WakeupCommand),
    /// Delete a box: stop it and delete its volume (all its files). Cannot be undone.
    #[command(visible_alias = "delete")]
    Rm {
        /// The box's name or id (`bx_…`).
        name: String,
        /// Print `{"removed": NAME}` instead of a sentence (the daemon answers 204, no body).
        #[arg(long)]
        json: bool,
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
    /// The box's sleep ladder; the template's by default.
    #[command(flatten)]
    pub sleep: SleepArgs,
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
    /// A label (repeatable); `berth box ls --label KEY=VALUE` selects by it.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub labels: Vec<(String, String)>,
    /// A variable of the box's env for its exec, terminals, agent and services (repeatable). Not a
    /// secret: stored and shown in plain text (`berth secret` is for credentials).
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Print the daemon's JSON answer (the new box) instead of its id.
    #[arg(long)]
    pub json: bool,
}

/// `POST` to one of the box's ladder verbs (`/pause`, `/resume`, `/snapshot`).
async fn ladder_call(client: &Client, name: &str, verb: &str) -> anyhow::Result<serde_json::Value> {
    Ok(client
        .json(Method::POST, &box_path(name, verb), None::<&()>, "a box")
        .await?)
}

/// Body of `POST /v1/boxes`. Absent fields are left out: the daemon applies its defaults.
#[derive(Debug, Serialize, PartialEq)]
struct CreateBody<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    template: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limits: Option<LimitsBody>,
    #[serde(flatten)]
    sleep: SleepBody,
    #[serde(skip_serializing_if = "Option::is_none")]
    egress: Option<EgressBody<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disk_mib: Option<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
}

/// The box's own egress policy: an allowlist and no credential rules.
#[derive(Debug, Serialize, PartialEq)]
struct EgressBody<'a> {
    allow: &'a [String],
}

impl CreateArgs {
    fn body(&self) -> CreateBody<'_> {
        let limits = LimitsBody::of(self.memory_mib, self.pids, self.cpus);
        CreateBody {
            name: &self.name,
            template: self.template.as_deref(),
            limits,
            sleep: self.sleep.body(),
            egress: (!self.allow.is_empty()).then_some(EgressBody { allow: &self.allow }),
            runtime: self.runtime.as_deref(),
            disk_mib: self.disk_mib,
            labels: self.labels.iter().cloned().collect(),
            env: self.env.iter().cloned().collect(),
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
    #[serde(default)]
    pub runtime: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct BoxListView {
    boxes: Vec<BoxView>,
}

pub async fn run(client: &Client, command: BoxCommand) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match command {
        BoxCommand::Create(args) => {
            let created: serde_json::Value = client
                .json(Method::POST, "/v1/boxes", Some(&args.body()), "a box")
                .await?;
            if args.json {
                output::json(&mut out, &created)?;
            } else {
                let created: BoxView =
                    serde_json::from_value(created).context("bad box from the daemon")?;
                writeln!(out, "{}", created.id)?;
            }
        }
        BoxCommand::Ls {
            labels,
            state,
            json,
        } => {
            let path = list_path(&labels, state.as_deref());
            let raw: serde_json::Value = client
                .json(Method::GET, &path, None::<&()>, "a box list")
                .await?;
            if json {
                output::json(&mut out, &raw)?;
            } else {
                let list: BoxListView =
                    serde_json::from_value(raw).context("bad box list from the daemon")?;
                out.write_all(table(&list.boxes).as_bytes())?;
            }
        }
        BoxCommand::Show { name, json } => {
            let raw: serde_json::Value = client
                .json(Method::GET, &box_path(&name, ""), None::<&()>, "a box")
                .await?;
            output::json(&mut out, &raw)?;
            // For a person only: a pipe gets the JSON alone, as before.
            if !json && std::io::IsTerminal::is_terminal(&out) {
                if let Some(phases) = crate::boot_phases::table_of(&raw) {
                    out.write_all(phases.as_bytes())?;
                }
            }
        }
        BoxCommand::Set(args) => {
            drop(out);
            return crate::cmd_box_set::run(client, args).await;
        }
        BoxCommand::Wakeup(command) => {
            drop(out);
            return crate::cmd_box_wakeup::run(client, command).await;
        }
        BoxCommand::Start {
            name,
            runtime,
            json,
        } => {
            let body = runtime.map(|r| serde_json::json!({ "runtime": r }));
            let view: serde_json::Value = client
                .json(
                    Method::POST,
                    &box_path(&name, "/start"),
                    body.as_ref(),
                    "a box",
                )
                .await?;
            print_box(&mut out, view, json)?;
        }
        BoxCommand::Stop { name, json } => {
            let view: serde_json::Value = client
                .json(
                    Method::POST,
                    &box_path(&name, "/stop"),
                    None::<&()>,
                    "a box",
                )
                .await?;
            print_box(&mut out, view, json)?;
        }
        BoxCommand::Pause { name, json } => {
            let view = ladder_call(client, &name, "/pause").await?;
            print_box(&mut out, view, json)?;
        }
        BoxCommand::Resume { name, json } => {
            let view = ladder_call(client, &name, "/resume").await?;
            print_box(&mut out, view, json)?;
        }
        BoxCommand::Snapshot { name, json } => {
            let view = ladder_call(client, &name, "/snapshot").await?;
            print_box(&mut out, view, json)?;
        }
        BoxCommand::Restore {
            name,
            from_copy: _,
            generation,
            json,
        } => {
            let mut body = serde_json::json!({ "from": "copy" });
            if let Some(generation) = generation {
                body["generation"] = generation.into();
            }
            let view: serde_json::Value = client
                .json(
                    Method::POST,
                    &box_path(&name, "/restore"),
                    Some(&body),
                    "a box",
                )
                .await?;
            print_box(&mut out, view, json)?;
        }
        BoxCommand::Rm { name, json } => {
            client
                .no_content(Method::DELETE, &box_path(&name, ""), None::<&()>)
                .await?;
            if json {
                output::json(&mut out, &serde_json::json!({ "removed": name }))?;
            } else {
                writeln!(out, "removed {name}")?;
            }
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(())
}

/// The box as JSON, or its one-line summary.
fn print_box(out: &mut impl Write, view: serde_json::Value, json: bool) -> anyhow::Result<()> {
    if json {
        return output::json(out, &view);
    }
    let view: BoxView = serde_json::from_value(view).context("bad box from the daemon")?;
    writeln!(out, "{}", summary(&view))?;
    Ok(())
}

/// `/v1/boxes` with the list's filters.
fn list_path(labels: &[(String, String)], state: Option<&str>) -> String {
    let mut query: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("label={}", query_value(&format!("{k}={v}"))))
        .collect();
    query.extend(state.map(|s| format!("state={}", query_value(s))));
    match query.is_empty() {
        true => "/v1/boxes".to_owned(),
        false => format!("/v1/boxes?{}", query.join("&")),
    }
}

/// `alice (bx_…): running`, plus the reason when the daemon gives one.
fn summary(view: &BoxView) -> String {
    let mut line = format!("{} ({}): {}", view.name, view.id, view.state);
    if let Some(reason) = view.state_reason.as_deref().filter(|r| !r.is_empty()) {
        line.push_str(&format!(" ({reason})"));
    }
    line
}

/// A box's labels in the list, at most this many characters (`…` when cut).
const LABELS_CHARS: usize = 40;

fn table(boxes: &[BoxView]) -> String {
    let rows: Vec<Vec<String>> = boxes
        .iter()
        .map(|b| {
            vec![
                b.name.clone(),
                b.id.clone(),
                b.state.clone(),
                b.runtime.clone(),
                b.template.clone(),
                b.created_at.clone(),
                compact_labels(&b.labels),
            ]
        })
        .collect();
    crate::table::table(
        &[
            "NAME", "ID", "STATE", "RUNTIME", "TEMPLATE", "CREATED", "LABELS",
        ],
        &rows,
    )
}

/// `k=v,k2=v2`, cut to [`LABELS_CHARS`] (`berth box show` has them all).
fn compact_labels(labels: &BTreeMap<String, String>) -> String {
    let all = labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    if all.chars().count() <= LABELS_CHARS {
        return all;
    }
    let mut cut: String = all.chars().take(LABELS_CHARS - 1).collect();
    cut.push('…');
    cut
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
            sleep: Default::default(),
            allow: Vec::new(),
            runtime: None,
            disk_mib: None,
            labels: Vec::new(),
            env: Vec::new(),
            json: false,
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
            sleep: SleepArgs {
                stop_after: Some(30),
                ..Default::default()
            },
            allow: vec!["api.anthropic.com".into(), "*.github.com".into()],
            runtime: Some("qemu".into()),
            disk_mib: Some(2048),
            labels: vec![("team".into(), "red".into())],
            env: vec![("DEBUG".into(), "1".into())],
            json: true,
        };
        assert_eq!(
            serde_json::to_value(args.body()).unwrap(),
            serde_json::json!({"name":"a","template":"host","limits":{"memory_mib":256,"cpus":0.5},"stop_after_s":30,"egress":{"allow":["api.anthropic.com","*.github.com"]},"runtime":"qemu","disk_mib":2048,"labels":{"team":"red"},"env":{"DEBUG":"1"}})
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
            {"id":"bx_1","name":"alice","template":"host","state":"running","runtime":"sandbox","created_at":"2026-11-29T22:00:00Z","labels":{"team":"red","tier":"1"},"extra":1},
            {"id":"bx_22","name":"b","template":"minimal","state":"stopped","runtime":"qemu","created_at":"2026-11-29T22:01:00Z"}
        ]}))
        .unwrap();
        let text = table(&boxes.boxes);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "NAME    ID      STATE     RUNTIME   TEMPLATE   CREATED                LABELS"
        );
        assert_eq!(
            lines[1],
            "alice   bx_1    running   sandbox   host       2026-11-29T22:00:00Z   team=red,tier=1"
        );
        assert_eq!(
            lines[2],
            "b       bx_22   stopped   qemu      minimal    2026-11-29T22:01:00Z"
        );
    }

    #[test]
    fn long_labels_are_cut_and_filters_go_in_the_query() {
        let labels: BTreeMap<String, String> = (0..10)
            .map(|i| (format!("key{i}"), "value".to_owned()))
            .collect();
        let text = compact_labels(&labels);
        assert_eq!(text.chars().count(), LABELS_CHARS);
        assert!(text.starts_with("key0=value,key1=value") && text.ends_with('…'));
        assert_eq!(list_path(&[], None), "/v1/boxes");
        assert_eq!(
            list_path(
                &[("team".into(), "a b".into()), ("x/y".into(), "1".into())],
                Some("running")
            ),
            "/v1/boxes?label=team%3Da%20b&label=x/y%3D1&state=running"
        );
    }

    #[test]
    fn box_paths_escape_the_reference() {
        assert_eq!(box_path("alice", "/start"), "/v1/boxes/alice/start");
        assert_eq!(box_path("a/b", ""), "/v1/boxes/a%2Fb");
    }
}
