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
    // The journalled events say the same (what a host reading after a restart gets): web-2's
    // replay and its result.
    let on_disk = std::fs::read_to_string(dirs.path("state/events.jsonl")).unwrap();
    assert_eq!(on_disk.matches(r#""message_id":"web-2""#).count(), 2);
}

/// A message written while the harness is still answering the previous one is not
/// answered by that answer: each `result` names the turn it ends, and the second message
/// counts as received only when the harness replays it.
#[tokio::test]
async fn a_result_names_its_own_turn_not_the_message_written_during_it() {
    let dirs = BoxDirs::new();
    dirs.harness(json!({}), json!({}));
    let agent = Agent::start(&dirs, &[]);
    // The replay acknowledges the first; its answer comes two seconds later.
    assert!(!agent.deliver("slow", "sleep 2000").await.unwrap());
    assert!(!agent.deliver("next", "hello").await.unwrap());
    let events = agent.events_until(0, |e| results(e) == 2).await;
    assert_contiguous(&events);
    let named = |kind: &str| -> Vec<Option<String>> {
        events
            .iter()
            .filter(|e| e.kind == kind)
            .map(|e| e.data[REPLAY_MESSAGE_ID].as_str().map(str::to_owned))
            .collect()
    };
    let both = vec![Some("slow".to_owned()), Some("next".to_owned())];
    assert_eq!(named("user"), both, "each replay names its message");
    assert_eq!(named("result"), both, "each result names the turn it ends");
}

/// Exactly once across a harness exit: the harness answers the first message and exits
/// without reading the second, written while it was answering. The first's answer must not
/// count the second as received: the restarted harness gets it and answers it.
#[tokio::test]
async fn a_message_written_during_the_last_answer_reaches_the_next_life() {
    let dirs = BoxDirs::new();
    dirs.harness(json!({}), json!({}));
    let agent = Agent::start(&dirs, &[]);
    assert!(!agent.deliver("last", "last 1500").await.unwrap());
    assert!(!agent.deliver("unread", "still here?").await.unwrap());
    let events = agent.events_until(0, |e| results(e) == 2).await;
    let answered: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "result")
        .map(|e| {
            (
                e.data[REPLAY_MESSAGE_ID].as_str(),
                e.data["result"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        answered,
        [
            (Some("last"), Some("echo: last 1500")),
            (Some("unread"), Some("echo: still here?")),
        ]
    );
    let exits = events.iter().filter(|e| e.kind == "harness_exit").count();
    assert_eq!(
        exits, 1,
        "the second answer came from the harness's next life"
    );
}
