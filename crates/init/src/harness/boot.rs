//! The `harness` boot phase: read `<run dir>/harness.json` (absent: the box has no
//! harness), prepare the agent state directory (root-only), open the journals. The harness
//! itself is started by [`super::supervisor::start`] without waiting for it.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use berth_protocol::guest::HARNESS_FILE;
use berth_protocol::harness::{AckMode, HarnessConfig, HarnessState};
use tokio::sync::{watch, Notify};

use super::event_log::{EventLog, EVENTS_FILE};
use super::message_log::MessageLog;
use super::{Harness, Journals, Live};

#[derive(Debug, thiserror::Error)]
pub enum HarnessBootError {
    #[error("harness phase: cannot prepare the agent state directory {path}")]
    StateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("harness phase: cannot open the {which} journal in {path}")]
    Journal {
        which: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

#[derive(Debug)]
pub struct Options<'a> {
    pub run_dir: &'a Path,
    pub state_dir: &'a Path,
    pub home: &'a Path,
    pub deliver_timeout: Duration,
}

/// What `harness.json` says.
enum Found {
    Absent,
    Valid(HarnessConfig),
    Invalid(String),
}

fn read_config(run_dir: &Path) -> Found {
    let path = run_dir.join(HARNESS_FILE);
    let raw = match std::fs::read(&path) {
        Ok(raw) => raw,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Found::Absent,
        Err(err) => return Found::Invalid(format!("cannot read {}: {err}", path.display())),
    };
    match serde_json::from_slice::<HarnessConfig>(&raw) {
        Err(err) => Found::Invalid(format!("invalid {}: {err}", path.display())),
        Ok(c) if c.command.first().is_none_or(|p| p.is_empty()) => {
            Found::Invalid(format!("{}: the command is empty", path.display()))
        }
        Ok(c) if c.ack == AckMode::Unknown => {
            Found::Invalid(format!("{}: unknown ack mode", path.display()))
        }
        Ok(c) => Found::Valid(c),
    }
}

pub fn load(opts: Options<'_>) -> Result<Harness, HarnessBootError> {
    let found = read_config(opts.run_dir);
    // Always: the event journal carries more than the harness's events (a background
    // process's exit), so a box without a harness has one too.
    let journals = Some(open_journals(opts.state_dir)?);
    if let (Some(j), Found::Valid(config)) = (&journals, &found) {
        if config.ack == AckMode::Replay {
            let mut messages = super::lock(&j.messages);
            super::recover::acks_from_replays(&mut messages, &j.state_dir.join(EVENTS_FILE))
                .map_err(|source| HarnessBootError::Journal {
                    which: "message",
                    path: j.state_dir.clone(),
                    source,
                })?;
        }
    }
    let last_seq = journals
        .as_ref()
        .map_or(0, |j| super::lock(&j.events).last_seq());
    let (state, reason, config) = match found {
        Found::Absent => (HarnessState::None, None, None),
        Found::Invalid(reason) => (HarnessState::Failed, Some(reason), None),
        Found::Valid(c) => (HarnessState::Starting, None, Some(c)),
    };
    Ok(Harness {
        config,
        journals,
        live: Mutex::new(Live {
            state,
            pid: None,
            reason,
            stdin: None,
            turns: Default::default(),
            exits_in_a_row: 0,
            stopping: false,
        }),
        changed: watch::Sender::new(0),
        last_seq: watch::Sender::new(last_seq),
        deliver_lock: tokio::sync::Mutex::new(()),
        deliver_timeout: opts.deliver_timeout,
        stop: Notify::new(),
        home: opts.home.to_owned(),
    })
}

fn open_journals(dir: &Path) -> Result<Journals, HarnessBootError> {
    let dir_err = |source| HarnessBootError::StateDir {
        path: dir.to_owned(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(dir_err)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(dir_err)?;
    let journal_err = |which| {
        move |source| HarnessBootError::Journal {
            which,
            path: dir.to_owned(),
            source,
        }
    };
    Ok(Journals {
        messages: Mutex::new(MessageLog::open(dir).map_err(journal_err("message"))?),
        events: Mutex::new(EventLog::open(dir).map_err(journal_err("event"))?),
        state_dir: dir.to_owned(),
    })
}
