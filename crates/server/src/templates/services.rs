//! A template's `[[services]]`: the daemons `berth-init` starts before the harness and
//! supervises (`berth_protocol::service`). Validated here, so the guest only ever gets
//! services it can run: names that are unique DNS labels, `after` naming only other
//! services of the file and making no cycle, and every number within its documented range.
//! Each error names the service and points at the line of the offending key or value.

use std::collections::{BTreeMap, HashMap};
use std::ops::{Range, RangeInclusive};

use berth_protocol::guest::BoxUser;
use berth_protocol::service::{
    ReadyCheck, RestartPolicy, ServiceConfig, DEFAULT_READY_TIMEOUT_S,
    DEFAULT_SERVICE_MAX_RESTARTS, DEFAULT_STOP_TIMEOUT_S, MAX_SERVICES, MAX_STOP_TIMEOUT_S,
};
use serde::Deserialize;
use toml::Spanned;

use super::program::{args_rule, env_rule, names_program, MAX_RESTARTS_RANGE, MAX_STRING_BYTES};
use super::source::Source;
use super::{TemplateError, TemplateErrorKind};
use crate::dns_label::label_rule;

const PORT_RANGE: RangeInclusive<u64> = 1..=65535;
/// Up to an hour: a service slower than that to get ready is stuck, not starting.
const READY_TIMEOUT_S_RANGE: RangeInclusive<u64> = 1..=3600;
/// At least a second, so SIGTERM always has a chance; at most what a box's stop waits for.
const STOP_TIMEOUT_S_RANGE: RangeInclusive<u64> = 1..=MAX_STOP_TIMEOUT_S;

/// One `[[services]]` table as written; strict like the rest of the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawService {
    name: Spanned<String>,
    command: Spanned<Vec<String>>,
    #[serde(default)]
    user: Option<Spanned<String>>,
    #[serde(default)]
    env: Option<Spanned<BTreeMap<String, String>>>,
    #[serde(default)]
    cwd: Option<Spanned<String>>,
    #[serde(default)]
    restart: Option<Spanned<String>>,
    #[serde(default)]
    ready: Option<Spanned<RawReady>>,
    #[serde(default)]
    after: Vec<Spanned<String>>,
    #[serde(default)]
    keep_awake: Option<bool>,
    #[serde(default)]
    max_restarts: Option<Spanned<u32>>,
    #[serde(default)]
    ready_timeout_s: Option<Spanned<u64>>,
    #[serde(default)]
    stop_timeout_s: Option<Spanned<u64>>,
}

/// `ready = { port = N }` or `ready = { command = [...] }`: exactly one of the two.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReady {
    #[serde(default)]
    port: Option<Spanned<u64>>,
    #[serde(default)]
    command: Option<Spanned<Vec<String>>>,
}

/// What is wrong with one service (the error names the service).
#[derive(Debug, thiserror::Error)]
pub enum ServiceProblem {
    #[error("the name is not a service name: {rule}")]
    Name { rule: &'static str },

    #[error("an earlier service has the same name")]
    DuplicateName,

    #[error("`{key}` must hold a program: a non-empty list whose first item is not empty")]
    EmptyCommand { key: &'static str },

    #[error("`{key}` {rule}")]
    BadValue { key: String, rule: &'static str },

    #[error("`user` {value:?} must be \"user\" or \"root\"")]
    User { value: String },

    #[error("`cwd` {cwd:?} must be an absolute path of at most 4096 bytes, with no NUL")]
    Cwd { cwd: String },

    #[error("`restart` {value:?} must be \"always\", \"on-failure\" or \"never\"")]
    Restart { value: String },

    #[error("`ready` must hold exactly one of `port` and `command`")]
    Ready,

    #[error("`{key}` = {value} is out of range {min}..={max}")]
    OutOfRange {
        key: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },

    #[error("`after` names the service itself")]
    AfterItself,

    #[error("`after` names {after:?}, which is not a service of this template")]
    UnknownAfter { after: String },
}

/// A problem of one service and where it was written.
type Fault = (Range<usize>, ServiceProblem);

fn at<T>(value: &Spanned<T>, problem: ServiceProblem) -> Fault {
    (value.span(), problem)
}

/// The validated services of a template's `[[services]]`, in the file's order.
pub(super) fn services(
    src: &Source<'_>,
    raw: &[Spanned<RawService>],
) -> Result<Vec<ServiceConfig>, TemplateError> {
    if let Some(extra) = raw.get(MAX_SERVICES) {
        return Err(src.at(
            extra,
            TemplateErrorKind::TooManyServices { max: MAX_SERVICES },
        ));
    }
    let names: Vec<&str> = raw
        .iter()
        .map(|s| s.get_ref().name.get_ref().as_str())
        .collect();
    let services = raw
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            service(index, entry.get_ref(), &names).map_err(|(span, problem)| {
                let name = names[index].to_owned();
                let kind = TemplateErrorKind::Service {
                    index,
                    name,
                    problem,
                };
                src.error(Some(span), kind)
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some((cycle, span)) = first_cycle(raw) {
        return Err(src.error(Some(span), TemplateErrorKind::ServiceCycle { cycle }));
    }
    Ok(services)
}

/// Service `index` of those named `names` (the file's, in order).
fn service(index: usize, raw: &RawService, names: &[&str]) -> Result<ServiceConfig, Fault> {
    let name = raw.name.get_ref();
    if let Some(rule) = label_rule(name) {
        return Err(at(&raw.name, ServiceProblem::Name { rule }));
    }
    if names[..index].contains(&name.as_str()) {
        return Err(at(&raw.name, ServiceProblem::DuplicateName));
    }
    let user = match &raw.user {
        None => BoxUser::User,
        Some(user) => match user.get_ref().as_str() {
            "user" => BoxUser::User,
            "root" => BoxUser::Root,
            other => {
                let value = other.to_owned();
                return Err(at(user, ServiceProblem::User { value }));
            }
        },
    };
    let restart = match &raw.restart {
        None => RestartPolicy::default(),
        Some(restart) => match restart.get_ref().as_str() {
            "always" => RestartPolicy::Always,
            "on-failure" => RestartPolicy::OnFailure,
            "never" => RestartPolicy::Never,
            other => {
                let value = other.to_owned();
                return Err(at(restart, ServiceProblem::Restart { value }));
            }
        },
    };
    Ok(ServiceConfig {
        name: name.clone(),
        command: command(&raw.command, "command")?,
        user,
        env: env(raw.env.as_ref())?,
        cwd: raw.cwd.as_ref().map(cwd).transpose()?,
        restart,
        ready: raw.ready.as_ref().map(ready).transpose()?,
        after: after(raw, names)?,
        keep_awake: raw.keep_awake.unwrap_or(false),
        max_restarts: or_default(
            &raw.max_restarts,
            "max_restarts",
            MAX_RESTARTS_RANGE,
            DEFAULT_SERVICE_MAX_RESTARTS,
        )?,
        ready_timeout_s: or_default(
            &raw.ready_timeout_s,
            "ready_timeout_s",
            READY_TIMEOUT_S_RANGE,
            DEFAULT_READY_TIMEOUT_S,
        )?,
        stop_timeout_s: or_default(
            &raw.stop_timeout_s,
            "stop_timeout_s",
            STOP_TIMEOUT_S_RANGE,
            DEFAULT_STOP_TIMEOUT_S,
        )?,
    })
}

fn command(raw: &Spanned<Vec<String>>, key: &'static str) -> Result<Vec<String>, Fault> {
    let command = raw.get_ref();
    if !names_program(command) {
        return Err(at(raw, ServiceProblem::EmptyCommand { key }));
    }
    if let Some(rule) = args_rule(command) {
        let key = key.to_owned();
        return Err(at(raw, ServiceProblem::BadValue { key, rule }));
    }
    Ok(command.clone())
}

fn env(raw: Option<&Spanned<BTreeMap<String, String>>>) -> Result<BTreeMap<String, String>, Fault> {
    let Some(env) = raw else {
        return Ok(BTreeMap::new());
    };
    if let Some((var, rule)) = env_rule(env.get_ref()) {
        let key = match var {
            Some(var) => format!("env.{var}"),
            None => "env".to_owned(),
        };
        return Err(at(env, ServiceProblem::BadValue { key, rule }));
    }
    Ok(env.get_ref().clone())
}

fn cwd(raw: &Spanned<String>) -> Result<String, Fault> {
    let cwd = raw.get_ref();
    if !cwd.starts_with('/') || cwd.contains('\0') || cwd.len() > MAX_STRING_BYTES {
        return Err(at(raw, ServiceProblem::Cwd { cwd: cwd.clone() }));
    }
    Ok(cwd.clone())
}

fn ready(raw: &Spanned<RawReady>) -> Result<ReadyCheck, Fault> {
    match raw.get_ref() {
        RawReady {
            port: Some(port),
            command: None,
        } => {
            let port = in_range(port, "ready.port", PORT_RANGE)?;
            Ok(ReadyCheck::Port(
                u16::try_from(port).expect("a port in 1..=65535 fits a u16"),
            ))
        }
        RawReady {
            port: None,
            command: Some(command_),
        } => Ok(ReadyCheck::Command(command(command_, "ready.command")?)),
        _ => Err(at(raw, ServiceProblem::Ready)),
    }
}

/// `after`, each entry naming another service of the file (cycles are checked once all are
/// known: [`first_cycle`]).
fn after(raw: &RawService, names: &[&str]) -> Result<Vec<String>, Fault> {
    for entry in &raw.after {
        let after = entry.get_ref();
        if after == raw.name.get_ref() {
            return Err(at(entry, ServiceProblem::AfterItself));
        }
        if !names.contains(&after.as_str()) {
            let after = after.clone();
            return Err(at(entry, ServiceProblem::UnknownAfter { after }));
        }
    }
    Ok(raw.after.iter().map(|a| a.get_ref().clone()).collect())
}

fn or_default<T: Copy + PartialOrd + Into<u64>>(
    value: &Option<Spanned<T>>,
    key: &'static str,
    range: RangeInclusive<T>,
    default: T,
) -> Result<T, Fault> {
    match value {
        None => Ok(default),
        Some(v) => in_range(v, key, range),
    }
}

fn in_range<T: Copy + PartialOrd + Into<u64>>(
    value: &Spanned<T>,
    key: &'static str,
    range: RangeInclusive<T>,
) -> Result<T, Fault> {
    let v = *value.get_ref();
    if range.contains(&v) {
        return Ok(v);
    }
    let problem = ServiceProblem::OutOfRange {
        key,
        value: v.into(),
        min: (*range.start()).into(),
        max: (*range.end()).into(),
    };
    Err(at(value, problem))
}

/// The first cycle `after` makes, walking the services in the file's order, as the names
/// along it (`a → b → a`: a waits for b, which waits for a), with where the `after` entry
/// that closes it was written. Every `after` names a known service other than its own by
/// now.
fn first_cycle(raw: &[Spanned<RawService>]) -> Option<(Vec<String>, Range<usize>)> {
    let mut walk = Walk {
        raw,
        index_of: raw
            .iter()
            .enumerate()
            .map(|(i, s)| (s.get_ref().name.get_ref().as_str(), i))
            .collect(),
        marks: vec![Mark::Unseen; raw.len()],
        path: Vec::new(),
    };
    (0..raw.len()).find_map(|i| match walk.marks[i] {
        Mark::Unseen => walk.visit(i),
        Mark::OnPath | Mark::Done => None,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Unseen,
    /// On the path being walked: reaching it again closes a cycle.
    OnPath,
    /// Walked, with everything it waits for: in no cycle.
    Done,
}

/// A depth-first walk along `after` (at most [`MAX_SERVICES`] deep).
struct Walk<'a> {
    raw: &'a [Spanned<RawService>],
    index_of: HashMap<&'a str, usize>,
    marks: Vec<Mark>,
    path: Vec<usize>,
}

impl Walk<'_> {
    fn visit(&mut self, i: usize) -> Option<(Vec<String>, Range<usize>)> {
        self.marks[i] = Mark::OnPath;
        self.path.push(i);
        let raw = self.raw;
        for entry in &raw[i].get_ref().after {
            let Some(&next) = self.index_of.get(entry.get_ref().as_str()) else {
                continue;
            };
            match self.marks[next] {
                Mark::OnPath => {
                    let from = self
                        .path
                        .iter()
                        .position(|&p| p == next)
                        .expect("a service on the path is in it");
                    let cycle = self.path[from..]
                        .iter()
                        .chain([&next])
                        .map(|&p| raw[p].get_ref().name.get_ref().clone())
                        .collect();
                    return Some((cycle, entry.span()));
                }
                Mark::Unseen => {
                    if let Some(found) = self.visit(next) {
                        return Some(found);
                    }
                }
                Mark::Done => {}
            }
        }
        self.path.pop();
        self.marks[i] = Mark::Done;
        None
    }
}

#[cfg(test)]
#[path = "services_tests.rs"]
mod tests;
