//! Why a template file was skipped: the file, the line when known, and what is wrong.

use std::path::PathBuf;

use berth_runtime::LayerError;

use super::ServiceProblem;
use crate::egress::policy::PolicyError;

/// A template file that was not loaded. Shown as `FILE:LINE: message`.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {kind}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct TemplateError {
    pub file: PathBuf,
    /// 1-based; `None` when the problem is the file as a whole (unreadable, too large).
    pub line: Option<usize>,
    /// Boxed: an error is rare, a `Result` of one is everywhere.
    pub kind: Box<TemplateErrorKind>,
}

impl TemplateError {
    /// The message without the file and line (the API's `errors[].message`).
    pub fn message(&self) -> String {
        self.kind.to_string()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TemplateErrorKind {
    #[error("cannot read the file: {0}")]
    Read(#[source] std::io::Error),

    #[error("node_labels: {0}")]
    NodeLabels(String),

    #[error("memory: {0}")]
    Memory(String),

    #[error("the file is larger than {max_bytes} bytes")]
    TooLarge { max_bytes: u64 },

    /// Not TOML, a key of the wrong type, a missing or unknown key.
    #[error("{}", .0.message())]
    Syntax(#[source] toml::de::Error),

    #[error("the file name {stem:?} is not a template name: {rule}")]
    BadFileName { stem: String, rule: &'static str },

    #[error("`name` {name:?} must equal the file name {stem:?}")]
    NameMismatch { name: String, stem: String },

    #[error("{name:?} is a built-in template; a file may not redefine it")]
    BuiltinClash { name: String },

    #[error("{0}")]
    Base(#[source] super::BaseError),

    #[error("`{key}` = {value} is out of range {min}..={max}")]
    OutOfRange {
        key: &'static str,
        value: String,
        min: String,
        max: String,
    },

    #[error("layers[{index}]: {reason}")]
    Layer { index: usize, reason: LayerError },

    #[error(
        "`harness.command` must hold a program: a non-empty list whose first item is not empty"
    )]
    EmptyCommand,

    #[error("`harness.ack` {value:?} must be \"replay\" or \"write\"")]
    BadAck { value: String },

    #[error("`{key}` {rule}")]
    BadValue { key: String, rule: &'static str },

    #[error("{0}")]
    SleepOrder(berth_store::SleepOrderError),

    /// An `[egress]` entry the policy check refused (the error names the entry).
    #[error("egress.{0}")]
    Egress(PolicyError),

    /// A `[[services]]` entry that does not validate.
    #[error("services[{index}] {name:?}: {problem}")]
    Service {
        index: usize,
        name: String,
        problem: ServiceProblem,
    },

    #[error("`services` may hold at most {max} services")]
    TooManyServices { max: usize },

    /// Services that wait for one another through `after`, so none could start.
    #[error("`after` makes a cycle of services: {} (each waits for the next)", .cycle.join(" → "))]
    ServiceCycle { cycle: Vec<String> },

    #[error("egress.credentials[{index}] ({name}): placeholder_env {var:?} is also set in the `env` of the harness or a service; the box's placeholder would hide it or be hidden by it")]
    PlaceholderClash {
        index: usize,
        name: String,
        var: String,
    },
}
