//! Each replay of a delivered message names it: the `user` event carries the message's id,
//! so two messages of the same text are told apart by id, never by their text.

use berth_protocol::harness::REPLAY_MESSAGE_ID;
use serde_json::json;

use super::common::{assert_contiguous, results, Agent, BoxDirs};

#[tokio::test]
async fn the_same_text_twice_gives_two_user_events_each_naming_its_message() {
    let dirs = BoxDirs::new();
    dirs.harness(json!({}), json!({}));
    let agent = Agent::start(&dirs, &[]);
    assert!(!agent.deliver("web-1", "same words").await.unwrap());
    assert!(!agent.deliver("web-2", "same words").await.unwrap());
    // A retry of the first is a duplicate: no third replay.
    assert!(agent.deliver("web-1", "same words").await.unwrap());
    let events = agent.events_until(0, |e| results(e) == 2).await;
    assert_contiguous(&events);
    let replays: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "user")
        .map(|e| {
            (
                e.data["message"]["content"].as_str().unwrap(),
                e.data[REPLAY_MESSAGE_ID].as_str(),
            )
        })
        .collect();
    assert_eq!(
        replays,
        [("same words", Some("web-1")), ("same words", Some("web-2"))]
    );
    // The journalled events say the same (what a host reading after a restart gets).
    let on_disk = std::fs::read_to_string(dirs.path("state/events.jsonl")).unwrap();
    assert_eq!(on_disk.matches(r#""message_id":"web-2""#).count(), 1);
}
