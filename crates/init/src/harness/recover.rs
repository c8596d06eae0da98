//! Closing the gap between a replay and its acknowledgement across a crash.
//!
//! With `ack = "replay"`, the harness's echo of a message is journalled as a `user` event
//! and then the message is journalled as acked. A box that dies between the two would,
//! on its next boot, write the message to the harness again, though the harness already
//! had it. So at boot, before anything is delivered, the event journal is read for replays
//! of the messages still unacked: each one found acks its message. The same holds for the
//! other two acknowledgements journalled as events: a `result` or a `turn_timeout` acks the
//! message it names. A `result` journalled by an older berth-init names none: it acks every
//! message written before it, as that berth-init did.

use std::io;
use std::path::Path;

use berth_protocol::harness::{GuestEvent, REPLAY_MESSAGE_ID};

use super::deliver::replayed_content;
use super::event_log::read_file_after;
use super::message_log::MessageLog;
use super::supervisor::TURN_TIMEOUT;

/// Acks every unacked message the event journal holds an acknowledgement of after the
/// point it was written: its replay (oldest first), or a `result` or `turn_timeout` naming it.
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
        match event.kind.as_str() {
            "user"
                if event.seq > next.after_seq
                    && replayed_content(&event.data).as_deref() == Some(next.content.as_str()) =>
            {
                let id = next.id.clone();
                messages.ack(&id)?;
            }
            "result" | TURN_TIMEOUT => match event.data.get(REPLAY_MESSAGE_ID) {
                Some(id) => {
                    if let Some(id) = id.as_str() {
                        messages.ack(id)?;
                    }
                }
                None if event.kind == "result" => {
                    messages.ack_written_before(event.seq)?;
                }
                None => {}
            },
            _ => {}
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

    /// Reopens the journal as a boot does and repairs it from the events: `a` and `b` are
    /// acked, `c` is not (`why`).
    fn assert_a_and_b_acked_after_boot(dir: &Path, why: &str) {
        let mut messages = MessageLog::open(dir).unwrap();
        acks_from_replays(&mut messages, &dir.join(EVENTS_FILE)).unwrap();
        assert!(messages.is_acked("a"));
        assert!(messages.is_acked("b"));
        assert!(messages.is_unacked("c"), "{why}");
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
        assert_a_and_b_acked_after_boot(dir.path(), "c was never replayed");
    }

    #[test]
    fn an_older_result_naming_nothing_or_a_turn_timeout_acks_what_came_before() {
        let dir = tempfile::tempdir().unwrap();
        let mut events = EventLog::open(dir.path()).unwrap();
        let mut messages = MessageLog::open(dir.path()).unwrap();
        messages.write("a", "never echoed", 0).unwrap();
        // An older berth-init journalled a's answer without naming it; the box died before the ack.
        events
            .append(vec![
                ("assistant".into(), json!({})),
                ("result".into(), json!({})),
            ])
            .unwrap();
        messages.write("b", "no result", 2).unwrap();
        messages.write("c", "after", 2).unwrap();
        events
            .append(vec![(
                TURN_TIMEOUT.into(),
                json!({"message_id":"b","after_s":3}),
            )])
            .unwrap();
        drop(messages);
        assert_a_and_b_acked_after_boot(dir.path(), "nothing acknowledged c");
    }

    #[test]
    fn a_result_naming_its_message_acks_that_one_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut events = EventLog::open(dir.path()).unwrap();
        let mut messages = MessageLog::open(dir.path()).unwrap();
        messages.write("a", "first", 0).unwrap();
        messages.write("b", "second", 0).unwrap();
        // b was written before a's answer was read: the answer is still a's alone.
        events
            .append(vec![("result".into(), json!({"message_id":"a"}))])
            .unwrap();
        drop(messages);
        let mut messages = MessageLog::open(dir.path()).unwrap();
        acks_from_replays(&mut messages, &dir.path().join(EVENTS_FILE)).unwrap();
        assert!(messages.is_acked("a"));
        assert!(messages.is_unacked("b"), "b's turn has not been answered");
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
