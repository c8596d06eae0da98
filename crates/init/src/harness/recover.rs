//! Closing the gap between a replay and its acknowledgement across a crash.
//!
//! With `ack = "replay"`, the harness's echo of a message is journalled as a `user` event
//! and then the message is journalled as acked. A box that dies between the two would,
//! on its next boot, write the message to the harness again, though the harness already
//! had it. So at boot, before anything is delivered, the event journal is read for replays
//! of the messages still unacked: each one found acks its message.

use std::io;
use std::path::Path;

use berth_protocol::harness::GuestEvent;

use super::deliver::replayed_content;
use super::event_log::read_file_after;
use super::message_log::MessageLog;

/// Acks every unacked message (oldest first) whose replay the event journal holds after
/// the point it was written.
pub fn acks_from_replays(messages: &mut MessageLog, events_file: &Path) -> io::Result<()> {
    let Some(first) = messages.oldest_unacked() else {
        return Ok(());
    };
    let events = match read_file_after(events_file, first.after_seq) {
        Ok(events) => events,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    for (_, line) in events {
        let Some(next) = messages.oldest_unacked() else {
            break;
        };
        let Ok(event) = serde_json::from_slice::<GuestEvent>(&line) else {
            continue;
        };
        if event.seq > next.after_seq
            && event.kind == "user"
            && replayed_content(&event.data).as_deref() == Some(next.content.as_str())
        {
            let id = next.id.clone();
            messages.ack(&id)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::event_log::{EventLog, EVENTS_FILE};
    use serde_json::json;

    fn replay(text: &str) -> (String, serde_json::Value) {
        (
            "user".into(),
            json!({"type":"user","message":{"role":"user","content":text}}),
        )
    }

    #[test]
    fn a_journalled_replay_acks_its_message_and_only_later_replays_count() {
        let dir = tempfile::tempdir().unwrap();
        let mut events = EventLog::open(dir.path()).unwrap();
        let mut messages = MessageLog::open(dir.path()).unwrap();
        // An old replay of the same text, before "b" was written: it must not ack "b".
        events.append(vec![replay("hi")]).unwrap();
        messages.write("a", "hi", 1).unwrap();
        messages.write("b", "hi", 1).unwrap();
        messages.write("c", "later", 1).unwrap();
        // The box died after journalling the replays of a and b, before their acks.
        events
            .append(vec![
                replay("hi"),
                ("assistant".into(), json!({})),
                replay("hi"),
            ])
            .unwrap();
        drop(messages);
        let mut messages = MessageLog::open(dir.path()).unwrap();
        acks_from_replays(&mut messages, &dir.path().join(EVENTS_FILE)).unwrap();
        assert!(messages.is_acked("a"));
        assert!(messages.is_acked("b"));
        assert!(messages.is_unacked("c"), "c was never replayed");
    }

    #[test]
    fn without_a_replay_nothing_is_acked() {
        let dir = tempfile::tempdir().unwrap();
        let mut messages = MessageLog::open(dir.path()).unwrap();
        messages.write("a", "hi", 0).unwrap();
        acks_from_replays(&mut messages, &dir.path().join(EVENTS_FILE)).unwrap();
        assert!(messages.is_unacked("a"));
    }
}
