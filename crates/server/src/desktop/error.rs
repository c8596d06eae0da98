//! What the desktop calls fail with; `api/error.rs` gives each its status.

use crate::desktop::action::{ActionProblem, MAX_ACTIONS};
use crate::desktop::names::XVFB_SERVICE;

#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    /// The box's template declares no X server (or, for watching, no VNC server).
    #[error("box {name} has no desktop (template {template} has no {service} service); use --template desktop")]
    NoDesktop {
        name: String,
        template: String,
        service: &'static str,
    },

    #[error("box {name}'s desktop failed: its {XVFB_SERVICE} service failed: {reason}; its log: `berth service logs {name} {XVFB_SERVICE}`")]
    XvfbFailed { name: String, reason: String },

    #[error("box {name}'s desktop is down: its {XVFB_SERVICE} service exited; start it again with `berth service restart {name} {XVFB_SERVICE}`")]
    XvfbExited { name: String },

    #[error("box {name} stopped or went to sleep while its desktop was starting; retry")]
    NotRunning { name: String },

    #[error("box {name}'s services did not settle within {waited_s} s ({pending}); retry, or see `berth service ls {name}`")]
    NotSettled {
        name: String,
        waited_s: u64,
        pending: String,
    },

    #[error("{count} actions: at most {MAX_ACTIONS} go in one request")]
    TooManyActions { count: usize },

    #[error("invalid actions[{index}] ({kind})")]
    InvalidAction {
        index: usize,
        kind: &'static str,
        #[source]
        problem: ActionProblem,
    },

    /// A program of a step ended with an error, timed out, or could not be run.
    #[error("{step} failed in box {name}: {}{}", end_text(*exit_code, *timed_out), stderr_text(stderr))]
    StepFailed {
        name: String,
        step: Step,
        /// `None`: it could not be run (`stderr` then holds the box's reason).
        exit_code: Option<i32>,
        timed_out: bool,
        stderr: String,
    },

    /// xdotool knew no key of that name: it ignored it, pressed the others, and exited 0.
    #[error("{step} in box {name}: xdotool knows no such key: {said}; the actions before it were done, and the other keys of it pressed (key names: docs/desktop.md)")]
    UnknownKey {
        name: String,
        step: Step,
        said: String,
    },

    /// A step's program printed what berth cannot read.
    #[error("{step} in box {name} printed what berth cannot read: {stdout:?}")]
    Unreadable {
        name: String,
        step: Step,
        stdout: String,
    },

    #[error("the screenshot of box {name} is over {limit_bytes} bytes")]
    ScreenshotTooLarge { name: String, limit_bytes: usize },
}

/// What a program run for the desktop was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `actions[index]`.
    Action {
        index: usize,
        kind: &'static str,
    },
    Screenshot,
    Cursor,
    Geometry,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Action { index, kind } => write!(f, "actions[{index}] ({kind})"),
            Step::Screenshot => f.write_str("the screenshot (scrot)"),
            Step::Cursor => f.write_str("reading the pointer (xdotool getmouselocation)"),
            Step::Geometry => f.write_str("reading the screen size (xdotool getdisplaygeometry)"),
        }
    }
}

fn end_text(exit_code: Option<i32>, timed_out: bool) -> String {
    match exit_code {
        _ if timed_out => "it timed out".to_owned(),
        Some(code) => format!("exit code {code}"),
        None => "it could not be run".to_owned(),
    }
}

fn stderr_text(stderr: &str) -> String {
    match stderr.trim() {
        "" => String::new(),
        text => format!(": {text}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_step_says_which_and_what_the_program_said() {
        let failed = DesktopError::StepFailed {
            name: "alice".into(),
            step: Step::Action {
                index: 3,
                kind: "key",
            },
            exit_code: Some(1),
            timed_out: false,
            stderr: "(symbol) No such key name 'Foo'.\n".into(),
        };
        assert_eq!(
            failed.to_string(),
            "actions[3] (key) failed in box alice: exit code 1: (symbol) No such key name 'Foo'."
        );
        let slow = DesktopError::StepFailed {
            name: "alice".into(),
            step: Step::Screenshot,
            exit_code: Some(137),
            timed_out: true,
            stderr: String::new(),
        };
        assert_eq!(
            slow.to_string(),
            "the screenshot (scrot) failed in box alice: it timed out"
        );
    }
}
