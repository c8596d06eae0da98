//! Messages of both services through both codecs and back, with the JSON shapes proto3 JSON
//! prescribes (the SDKs parse exactly these).

use berth_e2b_wire::filesystem::{
    watch_dir_response, EntryInfo, EventType, FileType, FilesystemEvent, GetWatcherEventsResponse,
    WatchDirResponse,
};
use berth_e2b_wire::process::{
    process_event::{self, data_event::Output, DataEvent},
    process_input::Input,
    process_selector::Selector,
    stream_input_request, ListResponse, ProcessConfig, ProcessEvent, ProcessInfo, ProcessInput,
    ProcessSelector, StreamInputRequest,
};
use berth_e2b_wire::Timestamp;
use berth_e2b_wire::{Codec, WireMessage};
use serde_json::json;

/// Encodes `message` in both codecs, checks it reads back equal, and returns its JSON.
fn round_trip<M: WireMessage + PartialEq + std::fmt::Debug>(message: &M) -> serde_json::Value {
    for codec in [Codec::Json, Codec::Proto] {
        let bytes = codec.encode(message).unwrap();
        assert_eq!(&codec.decode::<M>(&bytes).unwrap(), message, "{codec:?}");
    }
    serde_json::from_slice(&Codec::Json.encode(message).unwrap()).unwrap()
}

#[test]
fn process_list_with_maps_and_optional_fields() {
    let message = ListResponse {
        processes: vec![
            ProcessInfo {
                config: Some(ProcessConfig {
                    cmd: "sleep".into(),
                    args: vec!["60".into()],
                    envs: [("A".into(), "1".into()), ("B".into(), String::new())]
                        .into_iter()
                        .collect(),
                    cwd: None,
                }),
                pid: 4_294_967_295,
                tag: Some(String::new()),
            },
            ProcessInfo::default(),
        ],
    };
    let json = round_trip(&message);
    assert_eq!(
        json,
        json!({"processes": [
            {"config": {"cmd": "sleep", "args": ["60"], "envs": {"A": "1", "B": ""}},
             "pid": 4_294_967_295u32, "tag": ""},
            {}
        ]})
    );
}

#[test]
fn process_events_every_oneof_arm() {
    let events = [
        process_event::Event::Start(process_event::StartEvent { pid: 42 }),
        process_event::Event::Data(DataEvent {
            output: Some(Output::Stderr(vec![0xff; 3])),
        }),
        process_event::Event::Data(DataEvent {
            output: Some(Output::Pty(Vec::new())),
        }),
        process_event::Event::End(process_event::EndEvent {
            exit_code: i32::MIN,
            exited: false,
            status: String::new(),
            error: None,
        }),
        process_event::Event::Keepalive(process_event::KeepAlive {}),
    ];
    let expected_json = [
        json!({"event": {"start": {"pid": 42}}}),
        json!({"event": {"data": {"stderr": "////"}}}),
        // A oneof arm at its default is still present: its field says which arm is set.
        json!({"event": {"data": {"pty": ""}}}),
        json!({"event": {"end": {"exitCode": i32::MIN}}}),
        json!({"event": {"keepalive": {}}}),
    ];
    for (event, expected) in events.into_iter().zip(expected_json) {
        let message = berth_e2b_wire::process::StartResponse {
            event: Some(ProcessEvent { event: Some(event) }),
        };
        assert_eq!(round_trip(&message), expected);
    }
}

#[test]
fn stream_input_requests_and_selectors() {
    let start = StreamInputRequest {
        event: Some(stream_input_request::Event::Start(
            stream_input_request::StartEvent {
                process: Some(ProcessSelector {
                    selector: Some(Selector::Pid(0)),
                }),
            },
        )),
    };
    assert_eq!(
        round_trip(&start),
        json!({"start": {"process": {"pid": 0}}})
    );
    let data = StreamInputRequest {
        event: Some(stream_input_request::Event::Data(
            stream_input_request::DataEvent {
                input: Some(ProcessInput {
                    input: Some(Input::Stdin(b"ls\n".to_vec())),
                }),
            },
        )),
    };
    assert_eq!(
        round_trip(&data),
        json!({"data": {"input": {"stdin": "bHMK"}}})
    );
}

#[test]
fn watch_events_with_enums_entries_and_timestamps() {
    let entry = EntryInfo {
        name: "new".into(),
        r#type: FileType::Directory.into(),
        path: "/home/user/new".into(),
        size: -1,
        modified_time: Some(Timestamp {
            seconds: 253_402_300_799,
            nanos: 1_000,
        }),
        ..EntryInfo::default()
    };
    let event = FilesystemEvent {
        name: "new".into(),
        r#type: EventType::Create.into(),
        entry: Some(entry),
    };
    let streamed = WatchDirResponse {
        event: Some(watch_dir_response::Event::Filesystem(event.clone())),
    };
    assert_eq!(
        round_trip(&streamed),
        json!({"filesystem": {
            "name": "new",
            "type": "EVENT_TYPE_CREATE",
            "entry": {"name": "new", "type": "FILE_TYPE_DIRECTORY", "path": "/home/user/new",
                      "size": "-1", "modifiedTime": "9999-12-31T23:59:59.000001Z"}
        }})
    );
    let polled = GetWatcherEventsResponse {
        events: vec![
            event,
            FilesystemEvent {
                name: "gone".into(),
                r#type: EventType::Remove.into(),
                entry: None,
            },
        ],
    };
    let json = round_trip(&polled);
    assert_eq!(
        json["events"][1],
        json!({"name": "gone", "type": "EVENT_TYPE_REMOVE"})
    );
    let start = WatchDirResponse {
        event: Some(watch_dir_response::Event::Start(
            watch_dir_response::StartEvent {},
        )),
    };
    assert_eq!(round_trip(&start), json!({"start": {}}));
}

#[test]
fn json_input_in_the_other_accepted_spellings() {
    // Proto field names, integers as JSON numbers or strings, enums by number, URL-safe base64:
    // all proto3 JSON that a Connect client may send.
    let entry: EntryInfo = Codec::Json
        .decode(br#"{"symlink_target":"t","modified_time":"1970-01-01T00:00:01Z","size":7,"type":2,"mode":"8"}"#)
        .unwrap();
    assert_eq!(entry.symlink_target.as_deref(), Some("t"));
    assert_eq!(
        entry.modified_time,
        Some(Timestamp {
            seconds: 1,
            nanos: 0
        })
    );
    assert_eq!((entry.size, entry.mode), (7, 8));
    assert_eq!(entry.r#type(), FileType::Directory);
    let input: ProcessInput = Codec::Json.decode(br#"{"pty":"-_8"}"#).unwrap();
    assert_eq!(input.input, Some(Input::Pty(vec![0xfb, 0xff])));
}
