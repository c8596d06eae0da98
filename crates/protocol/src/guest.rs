//! The guest channel: HTTP/1.1 between the host and `berth-init`, over a Unix socket
//! bind-mounted into a sandbox (`/run/berth/agent.sock`) or vsock port 2024 in a VM.
//!
//! Every request carries `Authorization: Bearer <boot token>` and the caller's
//! [`crate::version::VERSION_HEADER`]. Bodies are JSON; streams are newline-delimited JSON;
//! errors are [`crate::ErrorBody`]. Lenient inside: every type here ignores unknown fields
//! and defaults missing optional ones, so a newer peer can add fields freely.
//!
//! | call | method and path | request | response |
//! |---|---|---|---|
//! | [`Call::Info`] | `GET /v1/info` | - | [`Info`] |
//! | [`Call::Exec`] | `POST /v1/exec` | [`ExecRequest`] | NDJSON of [`ExecFrame`] |
//! | [`Call::FileRead`] | `GET /v1/files?path=&user=` | - | the bytes, `Content-Length` = the size at open; a non-regular file is 400 `not_a_regular_file` |
//! | [`Call::FileWrite`] | `PUT /v1/files?path=&user=&mode=` | the bytes | 204 |
//! | [`Call::FileList`] | `GET /v1/files/list?path=&user=` | - | [`FileList`] |
//! | [`Call::FileStat`] | `GET /v1/files/stat?path=&user=` | - | [`FileEntry`] |
//! | [`Call::FileMkdir`] | `POST /v1/files/mkdir?path=&user=&recursive=` | - | 204 |
//! | [`Call::FileRemove`] | `DELETE /v1/files?path=&user=&recursive=` | - | 204 |
//! | [`Call::Shutdown`] | `POST /v1/shutdown` | - | 202, then the box stops |
//! | [`Call::Deliver`] | `POST /v1/messages` | [`DeliverRequest`] | [`DeliverResponse`] |
//! | [`Call::Events`] | `GET /v1/events?after=N` | - | NDJSON of [`GuestEvent`], open until the client leaves |
//! | [`Call::HarnessStatus`] | `GET /v1/harness` | - | [`HarnessStatus`] |
//! | [`Call::BootToken`] | `POST /v1/boot/token` | [`BootTokenRequest`] | 204; the old token is refused from then on |
//!
//! The harness calls (version 2) are described in `harness` below and in `docs/protocol.md`.
//! Version 3 makes the box a place to work in: terminals ([`crate::terminal`]), processes
//! that outlive their request ([`crate::process`]), whole directories and file watching
//! ([`crate::files`]), and in-box ports dialled for the host ([`crate::ports`]). Calls that
//! carry a byte stream both ways (a terminal, a port) are HTTP/1.1 upgrades: `101`, then the
//! connection is the stream.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::version::ProtocolVersion;

/// Where `berth-init` listens inside a sandbox box (the directory is bind-mounted from the
/// host, mode 0700, owned by the box's root).
pub const SANDBOX_RUN_DIR: &str = "/run/berth";
/// The agent socket's file name inside [`SANDBOX_RUN_DIR`].
pub const AGENT_SOCKET: &str = "agent.sock";
/// The file the host writes the boot token to before start; `berth-init` reads it once at
/// boot and deletes it.
pub const TOKEN_FILE: &str = "token";
/// The file the host writes the box's [`HarnessConfig`] to before start (absent: the box
/// has no harness). In the run dir, so only box root can read it.
pub const HARNESS_FILE: &str = "harness.json";
/// The box's own environment for this boot, written by the host before start as a JSON
/// object of strings (absent: none): the placeholders of its credential rules. `berth-init`
/// adds it to the base environment of every process it starts (harness and exec), under
/// the request's own `env`. In the run dir, so only box root can read the file.
pub const BOX_ENV_FILE: &str = "env.json";
/// The host end of the box's egress channel inside [`SANDBOX_RUN_DIR`]: a Unix socket the
/// host listens on. `berth-init` opens one stream to it per outbound TCP connection it
/// accepts on [`EGRESS_TLS_PORT`] or [`EGRESS_PROXY_PORT`] and copies bytes both ways,
/// unchanged: the gateway reads the CONNECT head (3128) or the ClientHello (443) itself.
/// In a VM the same streams go over vsock port [`EGRESS_VSOCK_PORT`] to the host.
pub const EGRESS_SOCKET: &str = "egress.sock";
/// A sandbox's `berth-init` finds its container's cgroup directory (one per hierarchy
/// holding the box's limits: cgroup2, or the v1 `pids` and `memory` ones), delegated to box
/// root and opened by the host, as file descriptors 3 onwards; it makes the box's own
/// cgroup in each with the limits in these variables of its environment (a number, or
/// absent for none: `pids.max` in processes, memory in bytes). The container's cgroup holds
/// those limits plus a reserve for `berth-init` itself.
pub const SANDBOX_PIDS_MAX_ENV: &str = "BERTH_BOX_PIDS_MAX";
pub const SANDBOX_MEMORY_MAX_ENV: &str = "BERTH_BOX_MEMORY_MAX";
/// The first of the cgroup directories' file descriptors.
pub const SANDBOX_CGROUP_FIRST_FD: i32 = 3;
/// The vsock port of the host's egress gateway, for VMs.
pub const EGRESS_VSOCK_PORT: u32 = 2025;
/// `berth-init` listens on 127.0.0.1 here; `/etc/hosts` pins each allowed host to it.
pub const EGRESS_TLS_PORT: u16 = 443;
/// `berth-init`'s HTTP CONNECT proxy on 127.0.0.1 (`HTTPS_PROXY`).
pub const EGRESS_PROXY_PORT: u16 = 3128;
/// The box's trust bundle: the host's CAs plus the box's own interception CA. Named by
/// `SSL_CERT_FILE`, `NODE_EXTRA_CA_CERTS`, `REQUESTS_CA_BUNDLE` and `CURL_CA_BUNDLE` in every
/// process `berth-init` starts.
pub const BOX_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The agent's own persistent directory on the box volume: root-only (0700), never visible
/// to the box user. Holds the message journal and the event journal.
pub const AGENT_STATE_DIR: &str = "/var/lib/berth";
/// Where a harness names its session (written by the harness; read by berth-init to fill
/// `{session}` in the resume arguments).
pub const SESSION_FILE: &str = "/home/user/.berth/session";
/// The vsock port of the agent in a VM (the seed's `--listen-vsock-port 2024`).
pub const VSOCK_PORT: u32 = 2024;
/// Largest file the channel carries in one read or write call.
pub const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;
/// Longest line of an NDJSON answer (an exec frame, a harness event) a peer reads; a longer
/// one ends the stream with an error. The largest honest line is a harness event: a stdout
/// line of at most 1 MiB (berth-init cuts longer ones) that, if it is not JSON, is sent as a
/// JSON string, where escaping can make each byte six (`\u0001`). An exec frame carries at
/// most 8 KiB of output, base64-encoded.
pub const MAX_NDJSON_LINE_BYTES: usize = 8 * 1024 * 1024;
/// Largest JSON answer a peer reads (info, stat, a directory listing, the harness status):
/// a listing of about 100,000 entries.
pub const MAX_JSON_ANSWER_BYTES: usize = 16 * 1024 * 1024;
/// Largest error body a peer reads: an [`crate::ErrorBody`] is a code and one message.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The box user: uid and gid of every user process.
pub const BOX_USER_UID: u32 = 1001;
pub const BOX_USER_NAME: &str = "user";
pub const BOX_HOME: &str = "/home/user";
pub const BOX_MEMORY: &str = "/memory";

/// Every call of the guest channel. The match in [`Call::introduced_in`] has no wildcard:
/// adding a call means saying which version brought it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Info,
    Exec,
    FileRead,
    FileWrite,
    FileList,
    FileStat,
    FileMkdir,
    FileRemove,
    Shutdown,
    Deliver,
    Events,
    HarnessStatus,
    /// What work in the box keeps it awake ([`crate::process::Busy`]).
    Busy,
    TerminalOpen,
    TerminalAttach,
    TerminalGet,
    TerminalResize,
    TerminalSignal,
    ProcessStart,
    ProcessList,
    ProcessOutput,
    ProcessStdin,
    ProcessSignal,
    FileArchiveRead,
    FileArchiveWrite,
    FileWatch,
    PortConnect,
    /// A restored (or claimed) box's new boot: the token changes and the clock is set.
    BootToken,
    /// The host's answer to a box's `wake_request` event ([`crate::wake`]).
    WakeReply,
    /// `POST /v1/files/move` ([`FileMove`]): a rename within the box.
    FileMove,
    /// `GET /v1/terminals` ([`crate::terminal::TerminalList`]).
    TerminalList,
    /// `POST /v1/processes?follow=true`: a process started and its output followed on one
    /// answer (its `ProcessInfo` line, then the frames of `GET …/output?offset=0`), so a
    /// command that is run to its end costs one round trip to the box, not two.
    ProcessStartFollowed,
    /// `GET /v1/services` ([`crate::service::ServiceList`]).
    ServiceList,
    /// `GET /v1/services/{name}/logs?offset=N&follow=B`.
    ServiceLogs,
    /// `POST /v1/services/{name}/restart`.
    ServiceRestart,
}

impl Call {
    pub fn introduced_in(self) -> ProtocolVersion {
        match self {
            Call::Info
            | Call::Exec
            | Call::FileRead
            | Call::FileWrite
            | Call::FileList
            | Call::FileStat
            | Call::FileMkdir
            | Call::FileRemove
            | Call::Shutdown => 1,
            Call::Deliver | Call::Events | Call::HarnessStatus => 2,
            Call::Busy
            | Call::TerminalOpen
            | Call::TerminalAttach
            | Call::TerminalGet
            | Call::TerminalResize
            | Call::TerminalSignal
            | Call::ProcessStart
            | Call::ProcessList
            | Call::ProcessOutput
            | Call::ProcessStdin
            | Call::ProcessSignal
            | Call::FileArchiveRead
            | Call::FileArchiveWrite
            | Call::FileWatch
            | Call::PortConnect => 3,
            Call::BootToken | Call::WakeReply => 4,
            Call::FileMove | Call::TerminalList => 5,
            Call::ProcessStartFollowed => 6,
            Call::ServiceList | Call::ServiceLogs | Call::ServiceRestart => 7,
        }
    }
}

/// Body of `POST /v1/boot/token`: a box restored from a snapshot (or claimed from a warm
/// pool) is a new boot to the outside, so the host hands over a fresh token on the channel
/// the old one authenticates. In a VM `berth-init` also sets the guest clock to `unix_ms`
/// (a restored guest's clock stood still while it slept); a sandbox shares the host's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootTokenRequest {
    pub token: String,
    /// The host's wall clock, milliseconds since the Unix epoch.
    #[serde(default)]
    pub unix_ms: u64,
}

/// Longest boot token `berth-init` accepts (the host's are 64 hex digits).
pub const MAX_BOOT_TOKEN_BYTES: usize = 256;

/// Answer to `GET /v1/info`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Info {
    pub protocol_version: ProtocolVersion,
    /// `berth-init`'s own version (its crate version).
    #[serde(default)]
    pub agent_version: String,
    /// Random per boot; the host checks it to know it reached this boot's agent.
    pub boot_id: String,
    #[serde(default)]
    pub uptime_ms: u64,
    /// Whether `berth-init` found itself in a VM or a sandbox.
    #[serde(default)]
    pub environment: Environment,
    /// Boot phases in the order they ran.
    #[serde(default)]
    pub phases: Vec<BootPhase>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Environment {
    #[default]
    Sandbox,
    Vm,
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootPhase {
    /// `mount`, `modules`, `volume`, `network`, `serve`, …
    pub name: String,
    pub duration_us: u64,
}

/// Who a call acts as inside the box.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoxUser {
    /// uid/gid 1001, no capabilities, `no_new_privs`, the user seccomp filter.
    #[default]
    User,
    /// The box's root: uid 0 inside the box's user namespace, never host root.
    Root,
}

impl BoxUser {
    pub fn as_str(self) -> &'static str {
        match self {
            BoxUser::User => "user",
            BoxUser::Root => "root",
        }
    }
}

/// Body of `POST /v1/exec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecRequest {
    /// Program and arguments; the program is looked up in `PATH` when it has no `/`.
    pub argv: Vec<String>,
    /// Added to (and overriding) the base environment: `PATH`, `HOME`, `USER`, `LOGNAME`,
    /// `SHELL`, `LANG`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Defaults to `/home/user`.
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub user: BoxUser,
    /// Written to the process's stdin, which is then closed. `None`: stdin is empty.
    #[serde(default)]
    pub stdin: Option<String>,
    /// The process group is killed (SIGKILL) after this long; `None`: no limit.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// One line of the NDJSON stream answering `POST /v1/exec`. The stream is
/// `started`, then any number of `stdout`/`stderr`, then exactly one `exit`; or, when the
/// process could not be started at all (no such program, bad cwd), a single `error` frame
/// and no `started`. A request that is wrong in itself gets an HTTP 400 instead of a stream.
/// When the client disconnects, `berth-init` kills the process group.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExecFrame {
    Started {
        pid: u32,
    },
    Stdout {
        #[serde(with = "base64_bytes")]
        #[cfg_attr(feature = "openapi", schema(value_type = String, format = Byte))]
        data: Vec<u8>,
    },
    Stderr {
        #[serde(with = "base64_bytes")]
        #[cfg_attr(feature = "openapi", schema(value_type = String, format = Byte))]
        data: Vec<u8>,
    },
    Exit {
        /// The exit code, or `None` when a signal ended the process.
        #[serde(default)]
        code: Option<i32>,
        #[serde(default)]
        signal: Option<i32>,
        #[serde(default)]
        timed_out: bool,
    },
    /// The process could not be started (no such program, bad cwd, …).
    Error {
        code: crate::ErrorCode,
        message: String,
    },
    /// A frame type from a newer peer.
    #[serde(other)]
    Unknown,
}

impl ExecFrame {
    /// The exit code a shell would report: the code, or 128 + signal.
    pub fn shell_status(code: Option<i32>, signal: Option<i32>) -> i32 {
        code.unwrap_or_else(|| 128 + signal.unwrap_or(0))
    }
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Other,
    #[serde(other)]
    Unknown,
}

/// One entry of `files/list`, and the answer of `files/stat`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub kind: FileKind,
    pub size: u64,
    /// Permission bits, e.g. `0o644` (as a number).
    pub mode: u32,
    /// Modification time, seconds since the Unix epoch.
    pub mtime: i64,
    /// The owner's and group's names in the box (the number when the box has no name for
    /// it). Absent from a berth-init older than protocol version 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// A symlink's target, as stored (version 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
}

/// Body of `POST /v1/files/move` (protocol version 5): renames `from` to `to` as `user`,
/// like rename(2): within the box's file systems, replacing a file or an empty directory at
/// `to`. Answered with the [`FileEntry`] now at `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileMove {
    pub from: String,
    pub to: String,
    #[serde(default)]
    pub user: BoxUser,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileList {
    pub entries: Vec<FileEntry>,
}

/// Query of every `files` call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileQuery {
    pub path: String,
    #[serde(default)]
    pub user: BoxUser,
    /// `files/mkdir`: create missing parents. `DELETE files`: remove a directory tree.
    #[serde(default)]
    pub recursive: bool,
    /// `PUT files`: permission bits of a new file (default 0o644).
    #[serde(default)]
    pub mode: Option<u32>,
}

/// How `PUT /v1/files` lands a file's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteMode {
    /// Into a temporary file beside it, synced, then renamed over it: a reader sees the old
    /// file or the whole new one, never a part.
    #[default]
    Atomic,
    /// Into the file itself, truncated first (`in_place=true`, protocol 6): what E2B's envd
    /// does, so a directory watch sees the name created and written, as E2B programs expect.
    /// An older agent ignores the key and writes atomically.
    InPlace,
}

pub(crate) mod base64_bytes {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        STANDARD
            .decode(s.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Version 1's schema, frozen: changing a shape here breaks old peers.
    #[test]
    fn version_1_schema_is_frozen() {
        let frames = [
            (
                ExecFrame::Started { pid: 7 },
                json!({"type":"started","pid":7}),
            ),
            (
                ExecFrame::Stdout {
                    data: b"hi\n".to_vec(),
                },
                json!({"type":"stdout","data":"aGkK"}),
            ),
            (
                ExecFrame::Stderr { data: vec![0xff] },
                json!({"type":"stderr","data":"/w=="}),
            ),
            (
                ExecFrame::Exit {
                    code: Some(3),
                    signal: None,
                    timed_out: false,
                },
                json!({"type":"exit","code":3,"signal":null,"timed_out":false}),
            ),
            (
                ExecFrame::Error {
                    code: crate::ErrorCode::NotFound,
                    message: "m".into(),
                },
                json!({"type":"error","code":"not_found","message":"m"}),
            ),
        ];
        for (frame, expected) in frames {
            assert_eq!(serde_json::to_value(&frame).unwrap(), expected);
            assert_eq!(
                serde_json::from_value::<ExecFrame>(expected).unwrap(),
                frame
            );
        }
        let req = ExecRequest {
            argv: vec!["sh".into(), "-c".into(), "id".into()],
            env: BTreeMap::from([("A".into(), "b".into())]),
            cwd: Some("/tmp".into()),
            user: BoxUser::Root,
            stdin: Some("in".into()),
            timeout_ms: Some(1000),
        };
        assert_eq!(
            serde_json::to_value(&req).unwrap(),
            json!({"argv":["sh","-c","id"],"env":{"A":"b"},"cwd":"/tmp","user":"root","stdin":"in","timeout_ms":1000})
        );
        let entry = FileEntry {
            name: "a".into(),
            kind: FileKind::Dir,
            size: 4096,
            mode: 0o755,
            mtime: 5,
            owner: None,
            group: None,
            symlink_target: None,
        };
        assert_eq!(
            serde_json::to_value(&entry).unwrap(),
            json!({"name":"a","kind":"dir","size":4096,"mode":493,"mtime":5})
        );
    }

    #[test]
    fn lenient_inside_unknown_fields_and_frames_are_accepted() {
        let req: ExecRequest = serde_json::from_value(json!({"argv":["true"],"future":1})).unwrap();
        assert_eq!(req.user, BoxUser::User);
        assert_eq!(req.cwd, None);
        let frame: ExecFrame = serde_json::from_value(json!({"type":"resize","rows":3})).unwrap();
        assert_eq!(frame, ExecFrame::Unknown);
        let info: Info =
            serde_json::from_value(json!({"protocol_version":2,"boot_id":"b","new":true})).unwrap();
        assert_eq!(info.environment, Environment::Sandbox);
    }

    #[test]
    fn shell_status_folds_signals() {
        assert_eq!(ExecFrame::shell_status(Some(2), None), 2);
        assert_eq!(ExecFrame::shell_status(None, Some(9)), 137);
    }
}

#[cfg(test)]
mod version_5_tests {
    use super::*;
    use crate::process::{ProcessInfo, ProcessRequest};
    use crate::terminal::{TerminalInfo, TerminalList, TerminalSize};
    use serde_json::json;

    /// Version 5's additions, frozen: a move, an entry's owner and link target, tags, and
    /// what a process or terminal was started with.
    #[test]
    fn version_5_schema_is_frozen() {
        assert_eq!(Call::FileMove.introduced_in(), 5);
        assert_eq!(Call::TerminalList.introduced_in(), 5);
        let moved = FileMove {
            from: "/a".into(),
            to: "/b".into(),
            user: BoxUser::Root,
        };
        assert_eq!(
            serde_json::to_value(&moved).unwrap(),
            json!({"from":"/a","to":"/b","user":"root"})
        );
        let entry: FileEntry = serde_json::from_value(json!({"name":"l","kind":"symlink","size":1,"mode":511,"mtime":2,"owner":"user","group":"user","symlink_target":"/x"})).unwrap();
        assert_eq!(entry.owner.as_deref(), Some("user"));
        assert_eq!(entry.symlink_target.as_deref(), Some("/x"));
        let req: ProcessRequest =
            serde_json::from_value(json!({"argv":["sh"],"tag":"web"})).unwrap();
        assert_eq!(req.tag.as_deref(), Some("web"));
        let info: ProcessInfo = serde_json::from_value(
            json!({"id":"pr_1","pid":3,"argv":["sh"],"tag":"web","cwd":"/tmp","env":{"A":"b"}}),
        )
        .unwrap();
        assert_eq!(
            (info.tag.as_deref(), info.cwd.as_deref()),
            (Some("web"), Some("/tmp"))
        );
        assert_eq!(info.env.get("A").map(String::as_str), Some("b"));
        let list = TerminalList {
            terminals: vec![TerminalInfo {
                id: "tm_1".into(),
                pid: 2,
                argv: vec![],
                user: BoxUser::User,
                size: TerminalSize { cols: 80, rows: 24 },
                attached: false,
                output_end: 0,
                output_start: 0,
                exit: None,
                tag: Some("t".into()),
                cwd: None,
                env: Default::default(),
            }],
        };
        assert_eq!(
            serde_json::to_value(&list).unwrap(),
            json!({"terminals":[{"id":"tm_1","pid":2,"argv":[],"user":"user","size":{"cols":80,"rows":24},"attached":false,"output_end":0,"output_start":0,"exit":null,"tag":"t"}]})
        );
    }
}
