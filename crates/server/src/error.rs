//! Typed errors of the daemon's operations. They know nothing about HTTP: `api/error.rs`
//! is the one place they become a status and an error body.

use std::net::SocketAddr;
use std::path::PathBuf;

use berth_protocol::{BoxId, ErrorCode};
use berth_runtime::error_chain;
use berth_runtime::{GuestError, RuntimeError};
use berth_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// The box's node did the op and it failed there: its status, code and words.
    #[error("{message}")]
    OnNode {
        status: u16,
        code: berth_protocol::ErrorCode,
        message: String,
    },

    /// The box's node cannot be reached or has not renewed its lease.
    #[error("the box's node {node} is unavailable: {reason}; retry in a moment")]
    NodeUnavailable { node: String, reason: String },

    /// A node's join was refused (its token, its name or its certificate request).
    #[error("the node cannot join: {0}")]
    Join(#[source] Box<crate::cluster::error::ClusterError>),

    /// No node can take a new box (none live with the runtime and labels asked for).
    #[error("{0}; add a node (`berth node`) or drop the node labels asked for")]
    NoNode(#[source] Box<StoreError>),

    /// No node of that name (`berth node drain|expunge`).
    #[error("no node {reference} (berth node ls lists them)")]
    NodeNotFound { reference: String },

    /// An operator's call on a node that its state forbids (an expunge of a live node).
    #[error("{0}")]
    NodeRefused(#[source] Box<StoreError>),

    /// As many calls of this kind run as `holder` may run at once (`crate::admission`).
    #[error("{holder} already has {limit} {what}; retry in a moment")]
    Busy {
        what: &'static str,
        limit: usize,
        holder: &'static str,
    },

    #[error("invalid box name {name:?}: {rule}")]
    InvalidName { name: String, rule: &'static str },

    #[error("invalid tenant name {name:?}: {rule}")]
    InvalidTenantName { name: String, rule: &'static str },

    #[error("a tenant named {name:?} already exists")]
    TenantNameTaken { name: String },

    #[error("unknown template {template:?}; available: {}", available.join(", "))]
    UnknownTemplate {
        template: String,
        available: Vec<String>,
    },

    #[error("{field} must be between {min} and {max}, got {value}")]
    LimitOutOfRange {
        field: &'static str,
        value: f64,
        min: f64,
        max: f64,
    },

    #[error("invalid path {path:?}: {rule}")]
    InvalidPath { path: String, rule: &'static str },

    #[error("invalid exec request: {rule}")]
    InvalidExec { rule: &'static str },

    #[error("invalid terminal request: {rule}")]
    InvalidTerminal { rule: &'static str },

    #[error("no process {id}: the box is not running, and its processes ended with it")]
    NoSuchProcess { id: String },

    /// The box has no service of that name (its template declares none, or, running, its
    /// agent knows none).
    #[error("no service {service:?} in box {name}")]
    NoSuchService { name: String, service: String },

    /// A service's log is kept in the box's memory, by its `berth-init`, for one boot.
    #[error("box {name} is not running ({state}): {}", services_not_running_hint(*state))]
    ServicesNotRunning {
        name: String,
        state: berth_store::BoxState,
    },

    /// The running box's `berth-init` speaks a protocol older than services (version 7).
    #[error("box {name}'s agent predates services: it was started by an older berth; stop and start the box to update it")]
    AgentPredatesServices { name: String },

    #[error("invalid label {key:?}: {rule}")]
    InvalidLabel { key: String, rule: &'static str },

    #[error("invalid env variable {name:?}: {rule}")]
    InvalidEnv { name: String, rule: &'static str },

    #[error("a box has at most {max} {what}, got {count}")]
    TooMany {
        what: &'static str,
        count: usize,
        max: usize,
    },

    #[error("invalid box filter {filter:?}: {rule}")]
    InvalidFilter { filter: String, rule: &'static str },

    /// A volume only grows: the file system inside is never shrunk.
    #[error("disk_mib {asked_mib} is below the box's volume size {current_mib} MiB: a volume only grows")]
    DiskShrink { current_mib: u64, asked_mib: u64 },

    #[error("invalid `egress`")]
    InvalidEgress(#[source] crate::egress::policy::PolicyError),

    /// A box's credential rule whose placeholder variable the template's harness or one of
    /// its services sets too.
    #[error("invalid `egress`: credentials[{index}] ({name}): placeholder_env {var:?} is also set in the `env` of template {template:?}'s harness or a service")]
    EgressEnvClash {
        index: usize,
        name: String,
        var: String,
        template: String,
    },

    #[error("the message content is over its limit of {limit_bytes} bytes")]
    MessageTooLarge { limit_bytes: u64 },

    #[error("invalid message id")]
    InvalidMessageId(#[source] berth_store::InvalidMessageId),

    #[error("box {name} has no harness to take messages: its template names no harness command")]
    NoHarness { name: String },

    #[error("message id {id} was already used for a message with different content")]
    IdempotencyConflict { id: berth_store::MessageId },

    #[error("invalid port {port:?}: a port is a number from 1 to 65535")]
    InvalidPort { port: String },

    /// Nothing listened on the port for as long as a request waits.
    #[error("nothing listens on port {port} in box {name} (waited {waited_s}s); start a server on 127.0.0.1:{port} or 0.0.0.0:{port} in the box")]
    PortNotListening {
        name: String,
        port: u16,
        waited_s: u64,
    },

    /// The app on the port broke HTTP (or went away before answering).
    #[error(transparent)]
    PortProxy(Box<crate::ports::proxy::ProxyError>),

    /// A share link (or the cookie it opened) that opens nothing.
    #[error(transparent)]
    LinkRefused(LinkRefusal),

    #[error("no share link {link_id} for this box")]
    PortLinkNotFound { link_id: String },

    #[error("box {box_id} already has {max} live share links; revoke one first")]
    TooManyPortLinks { box_id: BoxId, max: usize },

    #[error("no box {reference:?}")]
    BoxNotFound { reference: String },

    #[error("a box named {name:?} already exists")]
    NameTaken { name: String },

    /// The box changed under us (a concurrent call, or the state machine forbids it).
    #[error("box {id} is busy or in a state that forbids this call; retry")]
    Conflict {
        id: BoxId,
        #[source]
        source: Box<StoreError>,
    },

    #[error("box {name} could not be started; fix the cause (details in the daemon's log) and retry with POST /v1/boxes/{name}/start")]
    StartFailed {
        name: String,
        #[source]
        source: Box<RuntimeError>,
    },

    /// The runtime a new box asks for (or the default) is unknown or unavailable.
    #[error("invalid `runtime`")]
    InvalidRuntime(#[source] crate::runtimes::RuntimeLookupError),

    /// The box's runtime is unavailable in this daemon: nothing can be done to the box.
    #[error("box {name} cannot be reached")]
    BoxRuntime {
        name: String,
        #[source]
        source: crate::runtimes::RuntimeLookupError,
    },

    /// A sleep ladder whose rungs are out of order.
    #[error(transparent)]
    SleepOrder(#[from] berth_store::SleepOrderError),

    /// A box asked for a rung its runtime does not have.
    #[error("{field}: the {runtime} runtime cannot take a box to that rung (see its capabilities in GET /v1/runtimes); set it to 0")]
    RungUnsupported {
        field: &'static str,
        runtime: String,
    },

    /// A call needs a box that sleeps and its `auto_resume` is off.
    #[error("box {name} is {state} and does not wake on calls (auto_resume is off): resume it with POST /v1/boxes/{name}/resume")]
    Asleep {
        name: String,
        state: berth_store::BoxState,
    },

    /// The runtime cannot take the box to that rung, or the box is in no state to go there.
    #[error("box {name} cannot be {action}: {why}")]
    CannotSleep {
        name: String,
        action: &'static str,
        why: String,
    },

    /// A restore from a durable copy asked of a daemon that keeps none.
    #[error("this berth keeps no durable copies of volumes: set [storage] url in berth.toml (docs/config.md)")]
    NoDurableCopies,

    /// A restore asked for a copy the box does not have.
    #[error("box {name} has no durable copy{}: its volume is copied at each stop and every [storage] sync_interval_s while it runs", generation.map(|g| format!(" of generation {g}")).unwrap_or_default())]
    NoDurableCopy {
        name: String,
        generation: Option<u64>,
    },

    /// A restore asked for a box that is not stopped.
    #[error("box {name} is {state}: stop it first (POST /v1/boxes/{name}/stop), then restore its volume")]
    RestoreWhileAwake {
        name: String,
        state: berth_store::BoxState,
    },

    /// The box's volume could not be restored from its copy; the image is as it was.
    #[error("cannot restore box {name}'s volume from its durable copy (the volume is as it was)")]
    Restore {
        name: String,
        #[source]
        source: Box<crate::durable::error::DurableError>,
    },

    /// `disk_mib` out of its range.
    #[error("disk_mib must be between {min} and {max}, got {value}")]
    DiskOutOfRange { value: u64, min: u64, max: u64 },

    /// The template's base cannot run on the chosen runtime.
    #[error("template {template:?} (base {base}) cannot run on the {runtime} runtime: {hint}")]
    BaseNotOnRuntime {
        template: String,
        base: String,
        runtime: String,
        hint: &'static str,
    },

    /// The data dir's disk is below its free-space threshold.
    #[error(transparent)]
    DiskLow(#[from] crate::disk_space::DiskLow),

    #[error("template {template:?} is unavailable: {reason}")]
    TemplateUnavailable { template: String, reason: String },

    /// The box's template is gone or unusable at start: the box is `failed` with this.
    #[error("box {name} cannot start: its template {template:?} {problem}")]
    StartTemplate {
        name: String,
        template: String,
        problem: TemplateProblem,
    },

    /// The box's egress cannot be set up (a credential rule's secret is not set, …): the
    /// box is `failed` with this.
    #[error("box {name} cannot start: its egress cannot be set up")]
    StartEgress {
        name: String,
        #[source]
        source: Box<crate::egress::host::error::EgressBootError>,
    },

    #[error("cannot read the egress audit log of box {id}")]
    AuditRead {
        id: BoxId,
        #[source]
        source: std::io::Error,
    },

    /// A box whose volume is still a directory from an older berth cannot leave the sandbox
    /// before the sandbox has moved it into an image.
    #[error("box {name}'s volume is still a directory from an older berth: start it once on the sandbox (which moves it into an image), then move it")]
    VolumeNotMigrated { name: String },

    /// A box cannot move to another runtime while its own cannot vouch that nothing of it
    /// runs there (two runtimes on one volume image would corrupt it).
    #[error("box {name} cannot move from the {from} runtime: it is unavailable ({reason}), so berth cannot make sure nothing of the box still runs there")]
    MoveFromUnavailable {
        name: String,
        from: String,
        reason: String,
    },

    #[error("the runtime could not {action} box {id}")]
    Runtime {
        action: &'static str,
        id: BoxId,
        #[source]
        source: Box<RuntimeError>,
    },

    /// The box's id slot has no uid range (more boxes than `IdMap::SLOTS` were ever made).
    #[error("box {id} has id slot {slot}, past the last uid range")]
    NoIdRange { id: BoxId, slot: u32 },

    #[error("the box's agent failed the call")]
    Guest(#[source] Box<GuestError>),
    /// A memory read refused, in the volume reader's words (or the agent's, the same kinds).
    #[error("{}", .0.message)]
    Memory(berth_protocol::memory::VolumeReadFailure),
    /// This daemon has no volume reader (it was not started by the `berth` program).
    #[error("this daemon cannot read a sleeping box's volume: it was not started by the berth program; wake the box and read again")]
    NoVolumeReader,
    /// A running box did not answer its memory read in time.
    #[error("the box did not answer its memory read within {after:?}")]
    MemoryTimeout { after: std::time::Duration },
    /// The volume reader could not be run, or ended without an answer.
    #[error("cannot read the box's volume image")]
    MemoryReader(#[source] Box<berth_image::ImageError>),
    /// The memory history (snapshots in the chunk store) failed.
    #[error("the box's memory history failed")]
    MemoryHistory(#[source] berth_chunks::ChunkError),
    /// A backup or a restore of one failed (`crate::backup`).
    #[error(transparent)]
    Backup(Box<crate::backup::error::BackupError>),
    /// No snapshot of that id.
    #[error("box {box_id} has no memory snapshot {snapshot:?}; list them with GET /v1/boxes/{box_id}/memory/snapshots")]
    NoSuchSnapshot { box_id: BoxId, snapshot: String },
    /// A snapshot does not hold the path a restore or read named.
    #[error("memory snapshot {snapshot} holds no /memory/{path}")]
    NotInSnapshot { snapshot: String, path: String },
    /// The box's search index failed.
    #[error("the box's memory index failed")]
    MemoryIndex(#[source] berth_memory_index::IndexError),
    /// A search without words.
    #[error("the search has no words: give q=…")]
    EmptySearch,
    /// A search's `limit` outside what one answer holds.
    #[error("limit {limit} is outside 1–{max}")]
    BadSearchLimit { limit: usize, max: usize },
    /// Links asked for a file the index does not hold.
    #[error("/memory/{path} is not a file of the box's memory (its links are of files it holds)")]
    NotIndexed { path: String },

    /// The agent refused to run the process (no such program, bad cwd, …).
    #[error("exec failed in the box: {message}")]
    ExecRefused { code: ErrorCode, message: String },

    #[error("the box's agent closed the exec stream before the process exited")]
    ExecCut,

    /// The call would take the tenant past a limit of its quota; nothing was changed.
    #[error(transparent)]
    QuotaExceeded(berth_store::QuotaExceeded),

    #[error("no tenant {reference:?}")]
    TenantNotFound { reference: String },

    /// Only an admin key may make an admin key.
    #[error("only an admin key may add an admin key")]
    AdminKeyRequired,

    #[error("no API key {key_id} for this tenant")]
    KeyNotFound { key_id: String },

    #[error("API key {key_id} is the last admin key: add another admin key first (berth tenant key add default --admin)")]
    LastAdminKey { key_id: String },

    /// Every host uid range is held by a box.
    #[error("the host has no free id slot: all {limit} uid ranges are held by boxes; delete a box first")]
    NoIdSlot { limit: u32 },

    #[error("the store failed")]
    Store(#[source] Box<StoreError>),

    #[error(transparent)]
    Push(#[from] crate::push::PushError),

    #[error(transparent)]
    Webhook(#[from] crate::webhooks::WebhookError),

    #[error(transparent)]
    Wakeup(#[from] crate::lifecycle::wakeups::error::WakeupError),

    /// A desktop call refused or failed (`crate::desktop`).
    #[error(transparent)]
    Desktop(Box<crate::desktop::error::DesktopError>),

    /// The secret store refused or failed (a bad name or value, no such secret, a row
    /// that does not open).
    #[error(transparent)]
    Secret(Box<crate::secrets::error::SecretError>),

    #[error("the OS random source failed")]
    Random(#[source] getrandom::Error),

    #[error("a lifecycle task of box {id} panicked")]
    TaskPanicked {
        id: BoxId,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// What a caller who asked for a service's log of a box that is not running can do.
fn services_not_running_hint(state: berth_store::BoxState) -> &'static str {
    use berth_store::BoxState;
    match state {
        // Asleep with its memory (frozen, or saved to disk): the log is there once it runs.
        BoxState::Paused | BoxState::Snapshotted => {
            "its services' logs are kept while it sleeps; resume it to read them"
        }
        BoxState::Stopped
        | BoxState::Starting
        | BoxState::Running
        | BoxState::Stopping
        | BoxState::Failed
        | BoxState::Deleted => "its services' logs begin at its next start",
    }
}

/// Why a box's template does not let it start.
#[derive(Debug, thiserror::Error)]
pub enum TemplateProblem {
    #[error("no longer exists (removed, or its file failed the last reload); restore it and start the box again")]
    Missing,
    #[error("is unavailable: {reason}")]
    Unavailable { reason: String },
    #[error("cannot give the box its rootfs: {}", error_chain(.0))]
    Rootfs(Box<crate::lifecycle::rootfs_error::RootfsError>),
}

impl From<GuestError> for OpError {
    fn from(e: GuestError) -> Self {
        OpError::Guest(Box::new(e))
    }
}

impl From<crate::desktop::error::DesktopError> for OpError {
    fn from(e: crate::desktop::error::DesktopError) -> Self {
        OpError::Desktop(Box::new(e))
    }
}

impl From<crate::secrets::error::SecretError> for OpError {
    fn from(e: crate::secrets::error::SecretError) -> Self {
        OpError::Secret(Box::new(e))
    }
}

impl From<StoreError> for OpError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NameTaken { name } => OpError::NameTaken { name },
            StoreError::StaleGeneration { ref id, .. }
            | StoreError::RunsElsewhere { ref id, .. }
            | StoreError::Transition { ref id, .. }
            | StoreError::NotStopped { ref id, .. } => OpError::Conflict {
                id: id.clone(),
                source: Box::new(e),
            },
            StoreError::IdempotencyConflict { id } => OpError::IdempotencyConflict { id },
            StoreError::BoxNotFound { id } => OpError::BoxNotFound {
                reference: id.to_string(),
            },
            StoreError::QuotaExceeded(e) => OpError::QuotaExceeded(e),
            StoreError::TenantNotFound { reference } => OpError::TenantNotFound { reference },
            StoreError::KeyNotFound { key_id, .. } => OpError::KeyNotFound { key_id },
            StoreError::LastAdminKey { key_id } => OpError::LastAdminKey { key_id },
            StoreError::NoIdSlot { limit } => OpError::NoIdSlot { limit },
            StoreError::PortLinkNotFound { link_id, .. } => OpError::PortLinkNotFound { link_id },
            StoreError::TooManyPortLinks { box_id, max } => {
                OpError::TooManyPortLinks { box_id, max }
            }
            StoreError::NodeGone { node, lapsed_ms } => OpError::NodeUnavailable {
                node,
                reason: format!("it has not renewed its lease for {lapsed_ms} ms"),
            },
            e @ StoreError::NoNode { .. } => OpError::NoNode(Box::new(e)),
            StoreError::NodeNotFound { reference } => OpError::NodeNotFound { reference },
            e @ StoreError::NodeAlive { .. } => OpError::NodeRefused(Box::new(e)),
            other => OpError::Store(Box::new(other)),
        }
    }
}

/// Errors starting or running the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The memory history's chunk store cannot be opened.
    #[error("cannot open the memory history")]
    MemoryHistory(#[source] berth_chunks::ChunkError),
    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot open the store")]
    Store(#[from] StoreError),

    #[error("cannot open the store")]
    StoreConfig(#[from] crate::host_config::store::StoreConfigError),

    #[error("cannot open the secret store")]
    Secrets(#[from] crate::secrets::error::SecretError),

    #[error("cannot start the egress gateway")]
    Egress(#[from] crate::egress::host::error::EgressSetupError),

    #[error("cannot load the E2B API's access-token key")]
    E2b(#[from] crate::e2b::access_key::KeyError),

    #[error("cannot load the VAPID key for Web Push")]
    Push(#[from] crate::push::vapid::VapidError),

    #[error("another berth daemon is already running with the data directory {}", path.display())]
    DataDirInUse { path: PathBuf },

    #[error("cannot start durable copies ([storage] url)")]
    Durable(#[from] crate::durable::error::DurableError),

    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}

/// Why a link or its cookie opens nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LinkRefusal {
    #[error("no such share link (check the URL, or ask for a new link)")]
    Unknown,
    #[error("this share link has expired; ask for a new one")]
    Expired,
    #[error("this share link was revoked")]
    Revoked,
    #[error("this share link is for another box or port")]
    Elsewhere,
    #[error("the session this share link opened has ended; open the link again")]
    SessionEnded,
}

impl From<crate::backup::error::BackupError> for OpError {
    fn from(e: crate::backup::error::BackupError) -> OpError {
        match e {
            crate::backup::error::BackupError::DiskLow(low) => OpError::DiskLow(low),
            crate::backup::error::BackupError::Refused(refusal) => OpError::from(*refusal),
            e => OpError::Backup(Box::new(e)),
        }
    }
}
