//! Golden vectors: bytes written by the pinned E2B Python SDK's own generated classes, so that
//! wire compatibility is proven without Python at test time.
//!
//! Produced with `e2b==2.63.0` (which brings `protobuf-py` 0.6.0) in a venv:
//!
//! ```text
//! python3 -m venv /tmp/venv && /tmp/venv/bin/pip install e2b==2.63.0
//! /tmp/venv/bin/python gen.py
//! ```
//!
//! where `gen.py` builds each message below with `e2b.envd.process.process_pb` and
//! `e2b.envd.filesystem.filesystem_pb` (oneofs with `protobuf.Oneof`, the timestamp with
//! `protobuf.wkt.google.protobuf.timestamp_pb.Timestamp`) and prints `msg.to_json()` and
//! `msg.to_binary().hex()`. Each constant's comment shows the Python that built it.

use berth_e2b_wire::filesystem::{EntryInfo, FileType, ListDirResponse, StatResponse};
use berth_e2b_wire::process::{
    process_event::{data_event::Output, DataEvent, EndEvent, Event},
    process_selector::Selector,
    pty, ConnectResponse, ProcessConfig, ProcessEvent, ProcessSelector, Pty, SendSignalRequest,
    Signal, StartRequest, StartResponse,
};
use berth_e2b_wire::Timestamp;
use berth_e2b_wire::{Codec, WireMessage};

/// ```python
/// p.StartRequest(
///     process=p.ProcessConfig(cmd="/bin/bash", args=["-l", "-c", "echo $FOO"],
///                             envs={"FOO": "bar", "LANG": "C.UTF-8"}, cwd="/home/user"),
///     pty=p.PTY(size=p.PTY.Size(cols=80, rows=24)), tag="job-1", stdin=False)
/// ```
const START_REQUEST_JSON: &str = r#"{"process":{"cmd":"/bin/bash","args":["-l","-c","echo $FOO"],"envs":{"FOO":"bar","LANG":"C.UTF-8"},"cwd":"/home/user"},"pty":{"size":{"cols":80,"rows":24}},"tag":"job-1","stdin":false}"#;
const START_REQUEST_PROTO: &str = "0a470a092f62696e2f6261736812022d6c12022d6312096563686f2024464f4f1a0f0a044c414e471207432e5554462d381a0a0a03464f4f1203626172220a2f686f6d652f7573657212060a04085010181a056a6f622d312000";

/// ```python
/// p.StartResponse(event=p.ProcessEvent(event=Oneof("data",
///     p.ProcessEvent.DataEvent(output=Oneof("stdout", b"hi\n\x00\xff\xfe")))))
/// ```
const START_RESPONSE_STDOUT_JSON: &str = r#"{"event":{"data":{"stdout":"aGkKAP/+"}}}"#;
const START_RESPONSE_STDOUT_PROTO: &str = "0a0a12080a0668690a00fffe";

/// ```python
/// p.ConnectResponse(event=p.ProcessEvent(event=Oneof("end", p.ProcessEvent.EndEvent(
///     exit_code=-9, exited=True, status="signal: killed", error="killed"))))
/// ```
const CONNECT_RESPONSE_END_JSON: &str =
    r#"{"event":{"end":{"exitCode":-9,"exited":true,"status":"signal: killed","error":"killed"}}}"#;
const CONNECT_RESPONSE_END_PROTO: &str =
    "0a1e1a1c081110011a0e7369676e616c3a206b696c6c656422066b696c6c6564";

/// ```python
/// p.SendSignalRequest(process=p.ProcessSelector(selector=Oneof("tag", "job-1")),
///                     signal=p.Signal.SIGKILL)
/// ```
const SEND_SIGNAL_REQUEST_JSON: &str = r#"{"process":{"tag":"job-1"},"signal":"SIGNAL_SIGKILL"}"#;
const SEND_SIGNAL_REQUEST_PROTO: &str = "0a0712056a6f622d311009";

/// ```python
/// f.ListDirResponse(entries=[
///     f.EntryInfo(name="notes.txt", type=f.FileType.FILE, path="/home/user/notes.txt",
///                 size=5000000000, mode=0o644, permissions="-rw-r--r--", owner="user",
///                 group="user", modified_time=Timestamp(seconds=1767225600, nanos=123456789),
///                 metadata={"origin": "upload"}),
///     f.EntryInfo(name="link", type=f.FileType.SYMLINK, path="/home/user/link", mode=0o777,
///                 modified_time=Timestamp(seconds=-1), symlink_target="/home/user/notes.txt")])
/// ```
const LIST_DIR_RESPONSE_JSON: &str = r#"{"entries":[{"name":"notes.txt","type":"FILE_TYPE_FILE","path":"/home/user/notes.txt","size":"5000000000","mode":420,"permissions":"-rw-r--r--","owner":"user","group":"user","modifiedTime":"2026-01-01T00:00:00.123456789Z","metadata":{"origin":"upload"}},{"name":"link","type":"FILE_TYPE_SYMLINK","path":"/home/user/link","mode":511,"modifiedTime":"1969-12-31T23:59:59Z","symlinkTarget":"/home/user/notes.txt"}]}"#;
const LIST_DIR_RESPONSE_PROTO: &str = "0a630a096e6f7465732e74787410011a142f686f6d652f757365722f6e6f7465732e7478742080e497d01228a403320a2d72772d722d2d722d2d3a04757365724204757365724a0b0880f2d6ca0610959aef3a5a100a066f726967696e120675706c6f61640a3f0a046c696e6b10031a0f2f686f6d652f757365722f6c696e6b28ff034a0b08ffffffffffffffffff0152142f686f6d652f757365722f6e6f7465732e747874";

/// `EntryInfo.is_symlink` (field 12) is in the Python SDK's proto, not in the vendored one:
/// ```python
/// f.StatResponse(entry=f.EntryInfo(name="l", type=f.FileType.FILE, is_symlink=True))
/// ```
const STAT_RESPONSE_IS_SYMLINK_JSON: &str =
    r#"{"entry":{"name":"l","type":"FILE_TYPE_FILE","isSymlink":true}}"#;
const STAT_RESPONSE_IS_SYMLINK_PROTO: &str = "0a070a016c10016001";

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn json_value(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

/// Our decoder reads Python's bytes in both codecs as `expected`; our JSON equals Python's as a
/// JSON value; our binary has Python's bytes where the encoding is deterministic (a map of
/// more than one entry has no fixed order on the wire).
fn assert_compatible<M: WireMessage + PartialEq + std::fmt::Debug>(
    expected: &M,
    python_json: &str,
    python_proto_hex: &str,
) {
    let python_proto = unhex(python_proto_hex);
    assert_eq!(
        &Codec::Json.decode::<M>(python_json.as_bytes()).unwrap(),
        expected
    );
    assert_eq!(&Codec::Proto.decode::<M>(&python_proto).unwrap(), expected);

    let ours_json = Codec::Json.encode(expected).unwrap();
    assert_eq!(json_value(&ours_json), json_value(python_json.as_bytes()));
    assert_eq!(&Codec::Json.decode::<M>(&ours_json).unwrap(), expected);

    let ours_proto = Codec::Proto.encode(expected).unwrap();
    assert_eq!(ours_proto.len(), python_proto.len());
    assert_eq!(&Codec::Proto.decode::<M>(&ours_proto).unwrap(), expected);
}

#[test]
fn start_request_with_envs_cwd_pty_tag_and_stdin() {
    let expected = StartRequest {
        process: Some(ProcessConfig {
            cmd: "/bin/bash".into(),
            args: vec!["-l".into(), "-c".into(), "echo $FOO".into()],
            envs: [("FOO", "bar"), ("LANG", "C.UTF-8")]
                .into_iter()
                .map(|(key, value)| (key.into(), value.into()))
                .collect(),
            cwd: Some("/home/user".into()),
        }),
        pty: Some(Pty {
            size: Some(pty::Size { cols: 80, rows: 24 }),
        }),
        tag: Some("job-1".into()),
        // Explicit presence: `false` is sent, and differs from absent (envd's default: true).
        stdin: Some(false),
    };
    assert_compatible(&expected, START_REQUEST_JSON, START_REQUEST_PROTO);
}

#[test]
fn start_response_with_stdout_bytes() {
    let expected = StartResponse {
        event: Some(ProcessEvent {
            event: Some(Event::Data(DataEvent {
                output: Some(Output::Stdout(b"hi\n\x00\xff\xfe".to_vec())),
            })),
        }),
    };
    assert_compatible(
        &expected,
        START_RESPONSE_STDOUT_JSON,
        START_RESPONSE_STDOUT_PROTO,
    );
    assert_eq!(
        Codec::Proto.encode(&expected).unwrap(),
        unhex(START_RESPONSE_STDOUT_PROTO)
    );
}

#[test]
fn end_event_with_a_negative_exit_code() {
    let expected = ConnectResponse {
        event: Some(ProcessEvent {
            event: Some(Event::End(EndEvent {
                exit_code: -9,
                exited: true,
                status: "signal: killed".into(),
                error: Some("killed".into()),
            })),
        }),
    };
    assert_compatible(
        &expected,
        CONNECT_RESPONSE_END_JSON,
        CONNECT_RESPONSE_END_PROTO,
    );
    // sint32: -9 zigzags to 17 (0x11), where a plain int32 would take ten bytes.
    assert_eq!(
        Codec::Proto.encode(&expected).unwrap(),
        unhex(CONNECT_RESPONSE_END_PROTO)
    );
}

#[test]
fn send_signal_with_an_enum_and_a_tag_selector() {
    let mut expected = SendSignalRequest {
        process: Some(ProcessSelector {
            selector: Some(Selector::Tag("job-1".into())),
        }),
        signal: 0,
    };
    expected.set_signal(Signal::Sigkill);
    assert_compatible(
        &expected,
        SEND_SIGNAL_REQUEST_JSON,
        SEND_SIGNAL_REQUEST_PROTO,
    );
    assert_eq!(
        Codec::Proto.encode(&expected).unwrap(),
        unhex(SEND_SIGNAL_REQUEST_PROTO)
    );
}

#[test]
fn list_dir_response_with_timestamps_int64_and_metadata() {
    let expected = ListDirResponse {
        entries: vec![
            EntryInfo {
                name: "notes.txt".into(),
                r#type: FileType::File.into(),
                path: "/home/user/notes.txt".into(),
                size: 5_000_000_000,
                mode: 0o644,
                permissions: "-rw-r--r--".into(),
                owner: "user".into(),
                group: "user".into(),
                modified_time: Some(Timestamp {
                    seconds: 1_767_225_600,
                    nanos: 123_456_789,
                }),
                symlink_target: None,
                metadata: [("origin".into(), "upload".into())].into_iter().collect(),
            },
            EntryInfo {
                name: "link".into(),
                r#type: FileType::Symlink.into(),
                path: "/home/user/link".into(),
                mode: 0o777,
                modified_time: Some(Timestamp {
                    seconds: -1,
                    nanos: 0,
                }),
                symlink_target: Some("/home/user/notes.txt".into()),
                ..EntryInfo::default()
            },
        ],
    };
    assert_compatible(&expected, LIST_DIR_RESPONSE_JSON, LIST_DIR_RESPONSE_PROTO);
    assert_eq!(
        Codec::Proto.encode(&expected).unwrap(),
        unhex(LIST_DIR_RESPONSE_PROTO)
    );
}

#[test]
fn a_field_from_a_newer_proto_is_skipped_in_both_codecs() {
    let expected = StatResponse {
        entry: Some(EntryInfo {
            name: "l".into(),
            r#type: FileType::File.into(),
            ..EntryInfo::default()
        }),
    };
    let from_json: StatResponse = Codec::Json
        .decode(STAT_RESPONSE_IS_SYMLINK_JSON.as_bytes())
        .unwrap();
    let from_proto: StatResponse = Codec::Proto
        .decode(&unhex(STAT_RESPONSE_IS_SYMLINK_PROTO))
        .unwrap();
    assert_eq!(from_json, expected);
    assert_eq!(from_proto, expected);
}
