//! One template file: strict TOML (unknown keys are errors) into a validated [`Template`].
//! Every error carries the line of the offending key or value (toml's spans).

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::path::Path;

use berth_protocol::harness::{AckMode, HarnessConfig, DEFAULT_TURN_TIMEOUT_S};
use berth_protocol::memory::{MemoryFolder, MemoryLayout};
use berth_runtime::layer::{check_source, check_target};
use berth_runtime::{LayerError, Limits};
use serde::Deserialize;
use toml::Spanned;

use super::egress::{egress, RawEgress};
use super::program::{args_rule, env_rule, names_program, MAX_RESTARTS_RANGE, MAX_STRING_BYTES};
use super::services::{services, RawService};
use super::source::Source;
use super::{Base, LayerSpec, Origin, Template, TemplateError, TemplateErrorKind};
use crate::dns_label::label_rule;
// A template's defaults are limits a box may have: the same ranges.
use crate::validate::{CPUS_RANGE, DISK_MIB_RANGE, MEMORY_MIB_RANGE, PIDS_RANGE, SLEEP_RUNG_RANGE};
use berth_store::SleepSettings;

pub const DEFAULT_STOP_AFTER_S: u64 = 300;
/// The ladder's defaults: a box is stopped after five idle minutes and takes no other rung.
pub const DEFAULT_SLEEP: SleepSettings = SleepSettings {
    pause_after_s: 0,
    snapshot_after_s: 0,
    stop_after_s: DEFAULT_STOP_AFTER_S,
    auto_resume: true,
};
/// The protocol's default (a test checks they agree).
pub const DEFAULT_MAX_RESTARTS: u32 = 5;
/// Off (0) up to a day: a turn longer than that is a harness that forgot to say `result`.
const TURN_TIMEOUT_S_RANGE: RangeInclusive<u64> = 0..=86_400;
/// Pool boxes each hold a booted box's memory: a handful per template is what a pool is for.
pub const WARM_RANGE: RangeInclusive<u64> = 0..=16;
const MAX_LAYERS: usize = 32;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTemplate {
    name: Spanned<String>,
    #[serde(default)]
    base: Option<Spanned<String>>,
    #[serde(default)]
    pause_after_s: Option<Spanned<u64>>,
    #[serde(default)]
    snapshot_after_s: Option<Spanned<u64>>,
    #[serde(default)]
    stop_after_s: Option<Spanned<u64>>,
    /// `stop_after_s` before the sleep ladder had other rungs: read when that is absent.
    #[serde(default)]
    idle_timeout_s: Option<Spanned<u64>>,
    #[serde(default)]
    auto_resume: Option<bool>,
    #[serde(default)]
    disk_mib: Option<Spanned<u64>>,
    #[serde(default)]
    limits: Option<RawLimits>,
    #[serde(default)]
    layers: Vec<RawLayer>,
    #[serde(default)]
    harness: Option<RawHarness>,
    #[serde(default)]
    egress: Option<Spanned<RawEgress>>,
    #[serde(default)]
    warm: Option<Spanned<u64>>,
    /// Labels a node must carry to run its boxes (many hosts; `docs/cluster.md`).
    #[serde(default)]
    node_labels: Option<Spanned<BTreeMap<String, String>>>,
    /// How `/memory` is seeded on a box's first boot.
    #[serde(default)]
    memory: Option<Spanned<RawMemory>>,
    /// Daemons `berth-init` starts before the harness and supervises.
    #[serde(default)]
    services: Vec<Spanned<RawService>>,
}

/// `[memory]`: `owner = "Alice"`, `folders = { entities = "one line of what goes there" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMemory {
    #[serde(default)]
    owner: Option<String>,
    #[serde(default)]
    folders: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    #[serde(default)]
    memory_mib: Option<Spanned<u64>>,
    #[serde(default)]
    pids: Option<Spanned<u64>>,
    #[serde(default)]
    cpus: Option<Spanned<f64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLayer {
    source: Spanned<String>,
    target: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHarness {
    command: Spanned<Vec<String>>,
    #[serde(default)]
    resume_args: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    session: Option<Spanned<String>>,
    #[serde(default)]
    env: Option<Spanned<BTreeMap<String, String>>>,
    #[serde(default)]
    ack: Option<Spanned<String>>,
    #[serde(default)]
    max_restarts: Option<Spanned<u32>>,
    #[serde(default)]
    turn_timeout_s: Option<Spanned<u64>>,
}

/// Parses and validates the template in `text`, read from `file` (whose stem must be its
/// name). Does not check built-in names: the registry does.
pub fn parse_template(file: &Path, text: &str) -> Result<Template, TemplateError> {
    let src = Source::new(file, text);
    let raw: RawTemplate = toml::from_str(text)
        .map_err(|e| src.error(Some(e.span().unwrap_or(0..0)), TemplateErrorKind::Syntax(e)))?;

    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(rule) = label_rule(&stem) {
        return Err(src.error(None, TemplateErrorKind::BadFileName { stem, rule }));
    }
    let name = raw.name.get_ref();
    if name != &stem {
        return Err(src.at(
            &raw.name,
            TemplateErrorKind::NameMismatch {
                name: name.clone(),
                stem,
            },
        ));
    }

    let base = match &raw.base {
        None => Base::Host,
        Some(b) => {
            super::parse_base(b.get_ref()).map_err(|e| src.at(b, TemplateErrorKind::Base(e)))?
        }
    };
    let disk_mib = match &raw.disk_mib {
        None => berth_runtime::DEFAULT_DISK_MIB,
        Some(v) => in_range(&src, v, "disk_mib", DISK_MIB_RANGE)?,
    };
    let sleep = sleep(&src, &raw)?;
    let warm = match &raw.warm {
        None => 0,
        Some(v) => in_range(&src, v, "warm", WARM_RANGE)? as usize,
    };
    let limits = limits(&src, raw.limits.as_ref())?;
    let layers = layers(&src, &raw.layers)?;
    let harness = raw.harness.as_ref().map(|h| harness(&src, h)).transpose()?;
    let services = services(&src, &raw.services)?;
    let program_envs = harness
        .iter()
        .map(|h| &h.env)
        .chain(services.iter().map(|s| &s.env));
    let egress = egress(&src, raw.egress.as_ref(), program_envs)?;
    let memory = raw
        .memory
        .as_ref()
        .map(|m| memory_layout(&src, m))
        .transpose()?;
    let node_labels = match &raw.node_labels {
        None => BTreeMap::new(),
        Some(labels) => {
            crate::box_labels::validate(labels.get_ref())
                .map_err(|e| src.at(labels, TemplateErrorKind::NodeLabels(e.to_string())))?;
            labels.get_ref().clone()
        }
    };
    Ok(Template {
        name: name.clone(),
        base,
        sleep,
        limits,
        disk_mib,
        layers,
        harness,
        egress,
        warm,
        node_labels,
        memory,
        services,
        origin: Origin::File(file.to_path_buf()),
        unavailable: None,
        warnings: old_names(&raw),
    })
}

/// What the file should say instead of an earlier release's key names.
fn old_names(raw: &RawTemplate) -> Vec<String> {
    match (&raw.idle_timeout_s, &raw.stop_after_s) {
        (Some(old), None) => vec![format!(
            "idle_timeout_s = {} is the old name of stop_after_s; rename the key",
            old.get_ref()
        )],
        (Some(_), Some(_)) => vec![
            "idle_timeout_s (the old name of stop_after_s) is ignored: stop_after_s is given; \
             remove it"
                .into(),
        ],
        (None, _) => Vec::new(),
    }
}

/// The ladder's rungs: each off (0) or up to a week, and later rungs after earlier ones.
fn sleep(src: &Source<'_>, raw: &RawTemplate) -> Result<SleepSettings, TemplateError> {
    let rung = |value: &Option<Spanned<u64>>, key: &'static str, default: u64| match value {
        None => Ok(default),
        Some(v) => in_range(src, v, key, SLEEP_RUNG_RANGE),
    };
    let sleep = SleepSettings {
        pause_after_s: rung(&raw.pause_after_s, "pause_after_s", 0)?,
        snapshot_after_s: rung(&raw.snapshot_after_s, "snapshot_after_s", 0)?,
        stop_after_s: match (&raw.stop_after_s, &raw.idle_timeout_s) {
            (None, Some(old)) => in_range(src, old, "idle_timeout_s", SLEEP_RUNG_RANGE)?,
            (new, _) => rung(new, "stop_after_s", DEFAULT_STOP_AFTER_S)?,
        },
        auto_resume: raw.auto_resume.unwrap_or(true),
    };
    if let Err(order) = sleep.in_order() {
        let at = [
            &raw.stop_after_s,
            &raw.idle_timeout_s,
            &raw.snapshot_after_s,
            &raw.pause_after_s,
        ]
        .into_iter()
        .flatten()
        .next();
        let kind = TemplateErrorKind::SleepOrder(order);
        return Err(match at {
            Some(v) => src.at(v, kind),
            None => src.error(None, kind),
        });
    }
    Ok(sleep)
}

fn limits(src: &Source<'_>, raw: Option<&RawLimits>) -> Result<Limits, TemplateError> {
    let mut out = Limits::default();
    let Some(raw) = raw else { return Ok(out) };
    if let Some(v) = &raw.memory_mib {
        out.memory_mib = in_range(src, v, "limits.memory_mib", MEMORY_MIB_RANGE)?;
    }
    if let Some(v) = &raw.pids {
        out.pids = in_range(src, v, "limits.pids", PIDS_RANGE)?;
    }
    if let Some(v) = &raw.cpus {
        // `contains` is false for NaN too.
        out.cpus = in_range(src, v, "limits.cpus", CPUS_RANGE)?;
    }
    Ok(out)
}

fn in_range<T: PartialOrd + Copy + std::fmt::Display>(
    src: &Source<'_>,
    value: &Spanned<T>,
    key: &'static str,
    range: RangeInclusive<T>,
) -> Result<T, TemplateError> {
    let v = *value.get_ref();
    if range.contains(&v) {
        Ok(v)
    } else {
        Err(src.at(
            value,
            TemplateErrorKind::OutOfRange {
                key,
                value: v.to_string(),
                min: range.start().to_string(),
                max: range.end().to_string(),
            },
        ))
    }
}

fn layers(src: &Source<'_>, raw: &[RawLayer]) -> Result<Vec<LayerSpec>, TemplateError> {
    let layer_error = |index, at: &Spanned<String>, reason| {
        src.at(at, TemplateErrorKind::Layer { index, reason })
    };
    if raw.len() > MAX_LAYERS {
        return Err(src.at(
            &raw[MAX_LAYERS].target,
            TemplateErrorKind::BadValue {
                key: "layers".into(),
                rule: "may hold at most 32 layers",
            },
        ));
    }
    let mut out: Vec<LayerSpec> = Vec::with_capacity(raw.len());
    for (index, layer) in raw.iter().enumerate() {
        let target = layer.target.get_ref();
        check_target(target).map_err(|reason| {
            layer_error(
                index,
                &layer.target,
                LayerError::Target {
                    target: target.clone(),
                    reason,
                },
            )
        })?;
        let source = Path::new(layer.source.get_ref());
        check_source(source).map_err(|reason| layer_error(index, &layer.source, reason))?;
        if let Some(other) = out
            .iter()
            .find(|o| nests(&o.target, target) || nests(target, &o.target))
        {
            return Err(layer_error(
                index,
                &layer.target,
                LayerError::Overlap {
                    target: target.clone(),
                    other: other.target.clone(),
                },
            ));
        }
        out.push(LayerSpec {
            source: source.to_path_buf(),
            target: target.clone(),
        });
    }
    Ok(out)
}

/// `path` is `base` or under it.
fn nests(path: &str, base: &str) -> bool {
    path == base
        || path
            .strip_prefix(base)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn harness(src: &Source<'_>, raw: &RawHarness) -> Result<HarnessConfig, TemplateError> {
    let command = raw.command.get_ref();
    if !names_program(command) {
        return Err(src.at(&raw.command, TemplateErrorKind::EmptyCommand));
    }
    strings(src, &raw.command, "harness.command")?;
    let resume_args = match &raw.resume_args {
        Some(args) => {
            strings(src, args, "harness.resume_args")?;
            args.get_ref().clone()
        }
        None => Vec::new(),
    };
    let session = match &raw.session {
        Some(s) => {
            let v = s.get_ref();
            if v.is_empty() || v.len() > MAX_STRING_BYTES || v.contains(['\0', '\n']) {
                return Err(bad(src, s, "harness.session", "must be one non-empty line"));
            }
            Some(v.clone())
        }
        None => None,
    };
    let env = match &raw.env {
        Some(env) => {
            if let Some((var, rule)) = env_rule(env.get_ref()) {
                let key = match var {
                    Some(var) => format!("harness.env.{var}"),
                    None => "harness.env".to_owned(),
                };
                return Err(bad(src, env, &key, rule));
            }
            env.get_ref().clone()
        }
        None => BTreeMap::new(),
    };
    let ack = match &raw.ack {
        None => AckMode::Replay,
        Some(a) => match a.get_ref().as_str() {
            "replay" => AckMode::Replay,
            "write" => AckMode::Write,
            other => {
                return Err(src.at(
                    a,
                    TemplateErrorKind::BadAck {
                        value: other.to_owned(),
                    },
                ))
            }
        },
    };
    let max_restarts = match &raw.max_restarts {
        Some(v) => in_range(src, v, "harness.max_restarts", MAX_RESTARTS_RANGE)?,
        None => DEFAULT_MAX_RESTARTS,
    };
    let turn_timeout_s = match &raw.turn_timeout_s {
        Some(v) => in_range(src, v, "harness.turn_timeout_s", TURN_TIMEOUT_S_RANGE)?,
        None => DEFAULT_TURN_TIMEOUT_S,
    };
    Ok(HarnessConfig {
        command: command.clone(),
        resume_args,
        session,
        env,
        ack,
        max_restarts,
        turn_timeout_s,
    })
}

/// Arguments, as [`args_rule`] has them.
fn strings(src: &Source<'_>, list: &Spanned<Vec<String>>, key: &str) -> Result<(), TemplateError> {
    match args_rule(list.get_ref()) {
        Some(rule) => Err(bad(src, list, key, rule)),
        None => Ok(()),
    }
}

fn bad<T>(src: &Source<'_>, at: &Spanned<T>, key: &str, rule: &'static str) -> TemplateError {
    src.at(
        at,
        TemplateErrorKind::BadValue {
            key: key.to_owned(),
            rule,
        },
    )
}

/// The layout a `[memory]` table asks for: the default's owner or folders where it says
/// nothing of them.
fn memory_layout(src: &Source, raw: &Spanned<RawMemory>) -> Result<MemoryLayout, TemplateError> {
    let m = raw.get_ref();
    let default = MemoryLayout::default();
    let layout = MemoryLayout {
        owner: m.owner.clone().unwrap_or(default.owner),
        folders: match &m.folders {
            None => default.folders,
            Some(folders) => folders
                .iter()
                .map(|(name, about)| MemoryFolder {
                    name: name.clone(),
                    about: about.clone(),
                })
                .collect(),
        },
    };
    layout
        .check()
        .map_err(|why| src.at(raw, TemplateErrorKind::Memory(why)))?;
    Ok(layout)
}
