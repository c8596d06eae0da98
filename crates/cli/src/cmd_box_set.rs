//! `berth box set NAME …`: change a box's sleep ladder, limits, disk size, labels or env
//! (`PATCH /v1/boxes/{ref}`).
//!
//! The API replaces a box's labels (and env) whole; `--label`/`--unlabel` (and
//! `--env`/`--unset-env`) change single keys, so the command reads the box first and sends
//! the merged map. Two people changing one box's labels at the same moment: the last one
//! wins.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Context as _;
use clap::{ArgGroup, Args};
use http::Method;
use serde::{Deserialize, Serialize};

use crate::args::{box_path, parse_env, LimitsBody, SleepArgs, SleepBody};
use crate::client::Client;

#[derive(Debug, Args)]
#[command(
    // The ladder's flags come from `SleepArgs` (flattened): named here to join the group.
    group(ArgGroup::new("change").required(true).multiple(true)
        .args(["pause_after", "snapshot_after", "stop_after", "auto_resume"])),
    after_help = "\
The sleep ladder (--pause-after, --snapshot-after, --stop-after, --auto-resume) applies at once. Limits apply at the box's next start: while it runs, \
`berth box show` lists them under pending_limits. A disk only grows (at the next start). \
Env variables reach the next exec at once and the agent at the next start; they are not \
secrets (stored and shown in plain text; use `berth secret` for credentials).

Examples:
  berth box set alice --stop-after 30m --label team=red
  berth box set alice --env DEBUG=1 --unset-env OLD --memory-mib 1024"
)]
pub struct SetArgs {
    /// The box's name or id (`bx_…`).
    pub name: String,
    /// The box's sleep ladder (each rung at most 7 days; later rungs after earlier ones).
    #[command(flatten)]
    pub sleep: SleepArgs,
    /// Memory limit in MiB, 64-65536 (at the next start).
    #[arg(long, value_name = "N", group = "change")]
    pub memory_mib: Option<u64>,
    /// Most processes and threads at once, 16-65536 (at the next start).
    #[arg(long, value_name = "N", group = "change")]
    pub pids: Option<u64>,
    /// CPU share in cores, 0.1-256 (at the next start).
    #[arg(long, value_name = "F", group = "change")]
    pub cpus: Option<f64>,
    /// The volume size in MiB; only grows (at the next start).
    #[arg(long, value_name = "N", group = "change")]
    pub disk_mib: Option<u64>,
    /// Set a label (repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_env, group = "change")]
    pub labels: Vec<(String, String)>,
    /// Remove a label (repeatable).
    #[arg(long = "unlabel", value_name = "KEY", group = "change")]
    pub unlabels: Vec<String>,
    /// Set a variable of the box's env (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env, group = "change")]
    pub env: Vec<(String, String)>,
    /// Remove a variable from the box's env (repeatable).
    #[arg(long = "unset-env", value_name = "NAME", group = "change")]
    pub unset_env: Vec<String>,
    /// Print the daemon's JSON answer (the changed box) instead of a summary.
    #[arg(long)]
    pub json: bool,
}

/// Body of `PATCH /v1/boxes/{ref}`: only what changes.
#[derive(Debug, Default, Serialize, PartialEq)]
struct PatchBody {
    #[serde(flatten)]
    sleep: SleepBody,
    #[serde(skip_serializing_if = "Option::is_none")]
    limits: Option<LimitsBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disk_mib: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    labels: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    env: Option<BTreeMap<String, String>>,
}

/// The maps of the box as it is, for the merge.
#[derive(Debug, Default, Deserialize)]
struct Maps {
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

impl SetArgs {
    fn changes_labels(&self) -> bool {
        !self.labels.is_empty() || !self.unlabels.is_empty()
    }

    fn changes_env(&self) -> bool {
        !self.env.is_empty() || !self.unset_env.is_empty()
    }

    /// The body for a box whose maps are `now`.
    fn body(&self, now: Maps) -> PatchBody {
        PatchBody {
            sleep: self.sleep.body(),
            limits: LimitsBody::of(self.memory_mib, self.pids, self.cpus),
            disk_mib: self.disk_mib,
            labels: self
                .changes_labels()
                .then(|| merged(now.labels, &self.labels, &self.unlabels)),
            env: self
                .changes_env()
                .then(|| merged(now.env, &self.env, &self.unset_env)),
        }
    }
}

fn merged(
    mut map: BTreeMap<String, String>,
    set: &[(String, String)],
    unset: &[String],
) -> BTreeMap<String, String> {
    for key in unset {
        map.remove(key);
    }
    map.extend(set.iter().cloned());
    map
}

pub async fn run(client: &Client, args: SetArgs) -> anyhow::Result<()> {
    let path = box_path(&args.name, "");
    let now = if args.changes_labels() || args.changes_env() {
        client
            .json::<Maps>(Method::GET, &path, None::<&()>, "a box")
            .await?
    } else {
        Maps::default()
    };
    let body = args.body(now);
    let view: serde_json::Value = client
        .json(Method::PATCH, &path, Some(&body), "a box")
        .await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        return crate::output::json(&mut out, &view);
    }
    writeln!(
        out,
        "{} ({}): changed",
        view["name"].as_str().unwrap_or(&args.name),
        view["id"].as_str().unwrap_or("")
    )?;
    if let Some(pending) = view.get("pending_limits").and_then(|p| p.as_object()) {
        let limits: Vec<String> = ["memory_mib", "pids", "cpus"]
            .iter()
            .filter_map(|k| pending.get(*k).map(|v| format!("{k}={v}")))
            .collect();
        writeln!(out, "limits at the next start: {}", limits.join(" "))?;
    }
    out.flush().context("writing to stdout")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn args(argv: &[&str]) -> SetArgs {
        let mut full = vec!["berth", "box", "set"];
        full.extend_from_slice(argv);
        match crate::Cli::try_parse_from(full).unwrap().command {
            crate::Command::Box(crate::cmd_box::BoxCommand::Set(args)) => args,
            other => panic!("not box set: {other:?}"),
        }
    }

    #[test]
    fn durations_take_units() {
        use crate::args::{parse_duration_s, parse_rung};
        for (raw, s) in [
            ("90", 90),
            ("90s", 90),
            ("30m", 1800),
            ("2h", 7200),
            ("1d", 86_400),
        ] {
            assert_eq!(parse_duration_s(raw), Ok(s), "{raw}");
        }
        for bad in ["", "m", "5x", "-5", "1.5h", "99999999999999999999d"] {
            assert!(parse_duration_s(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_rung("never"), Ok(0));
        assert_eq!(parse_rung("10m"), Ok(600));
    }

    #[test]
    fn single_keys_merge_into_the_box_maps_and_only_changes_are_sent() {
        let a = args(&[
            "alice",
            "--label",
            "team=red",
            "--unlabel",
            "old",
            "--stop-after",
            "30m",
            "--memory-mib",
            "1024",
        ]);
        let now = Maps {
            labels: [("old", "x"), ("keep", "y")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            env: BTreeMap::new(),
        };
        assert_eq!(
            serde_json::to_value(a.body(now)).unwrap(),
            serde_json::json!({"stop_after_s": 1800, "limits": {"memory_mib": 1024},
                               "labels": {"keep": "y", "team": "red"}})
        );
        let e = args(&["alice", "--env", "A=1=2", "--unset-env", "B"]);
        assert_eq!(
            serde_json::to_value(e.body(Maps::default())).unwrap(),
            serde_json::json!({"env": {"A": "1=2"}})
        );
    }

    #[test]
    fn a_set_without_a_change_is_a_usage_error() {
        let err = crate::Cli::try_parse_from(["berth", "box", "set", "alice"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        let err =
            crate::Cli::try_parse_from(["berth", "box", "set", "alice", "--label", "novalue"])
                .unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }
}
