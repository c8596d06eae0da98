//! What the echo harness answers, and how it reads a stream-json user message.

use serde_json::Value;

/// The text of a stream-json user line `{"type":"user","message":{"role":"user","content":…}}`:
/// `content` is a string, or Claude's array of blocks whose `text` blocks are joined.
/// `None` when the line is not a user message.
pub fn user_text(line: &Value) -> Option<String> {
    if line.get("type")?.as_str()? != "user" {
        return None;
    }
    match line.get("message")?.get("content")? {
        Value::String(text) => Some(text.clone()),
        Value::Array(blocks) => Some(
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
        ),
        _ => None,
    }
}

/// The answer to `content`, given the earlier user messages of this session.
pub fn answer(content: &str, earlier: &[String]) -> String {
    let trimmed = content.trim();
    if let Some(rest) = trimmed.strip_prefix("remember ") {
        return format!("OK, I will remember {}.", rest.trim());
    }
    if trimmed.to_lowercase().contains("what did i say") {
        if earlier.is_empty() {
            return "You said: (nothing yet)".to_owned();
        }
        return format!("You said: {}", earlier.join("; "));
    }
    format!("echo: {content}")
}

/// A test hook named by the message content.
#[derive(Debug, PartialEq, Eq)]
pub enum Hook {
    /// `crash`: exit with status 3 after replaying the message, before answering.
    Crash,
    /// `flood N`: print one line of N bytes to stdout before answering.
    Flood(usize),
    /// `sleep MS`: wait MS milliseconds before answering.
    Sleep(u64),
    /// `last MS`: wait MS milliseconds, answer, then exit with status 3 before reading
    /// another line (what was written meanwhile is left unread in the pipe).
    Last(u64),
    /// `stream N`: answer in N `assistant` lines, [`STREAM_PAUSE`] apart, so a client can
    /// watch an answer arrive over time (and lose its network in the middle of one).
    Stream(usize),
}

/// The pause between two chunks of a `stream N` answer.
pub const STREAM_PAUSE: std::time::Duration = std::time::Duration::from_millis(300);

/// Most chunks a `stream N` answer has (a typo must not hold the harness for hours).
pub const STREAM_MAX: usize = 1000;

/// The `i`th (from 1) of `n` chunks of a `stream N` answer: each names itself, so a
/// reader can tell a missing chunk from a doubled one.
pub fn stream_chunk(i: usize, n: usize) -> String {
    format!("chunk {i:03} of {n:03}. ")
}

pub fn hook(content: &str) -> Option<Hook> {
    let trimmed = content.trim();
    if trimmed == "crash" {
        return Some(Hook::Crash);
    }
    let (word, arg) = trimmed.split_once(' ')?;
    match word {
        "flood" => arg.trim().parse().ok().map(Hook::Flood),
        "sleep" => arg.trim().parse().ok().map(Hook::Sleep),
        "last" => arg.trim().parse().ok().map(Hook::Last),
        "stream" => arg
            .trim()
            .parse()
            .ok()
            .filter(|n| (1..=STREAM_MAX).contains(n))
            .map(Hook::Stream),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_remember_recall_and_echo() {
        assert_eq!(answer("remember 42", &[]), "OK, I will remember 42.");
        assert_eq!(
            answer("what did I say?", &["remember 42".into(), "hi".into()]),
            "You said: remember 42; hi"
        );
        assert_eq!(answer("What did I say", &[]), "You said: (nothing yet)");
        assert_eq!(answer("hi there", &[]), "echo: hi there");
    }

    #[test]
    fn content_is_a_string_or_text_blocks() {
        let line = json!({"type":"user","message":{"role":"user","content":"hi"}});
        assert_eq!(user_text(&line).unwrap(), "hi");
        let blocks = json!({"type":"user","message":{"role":"user","content":[
            {"type":"text","text":"a"},{"type":"image","source":{}},{"type":"text","text":"b"}]}});
        assert_eq!(user_text(&blocks).unwrap(), "ab");
        assert!(user_text(&json!({"type":"assistant","message":{"content":"x"}})).is_none());
        assert!(user_text(&json!({"type":"user","message":{"content":3}})).is_none());
        assert!(user_text(&json!("user")).is_none());
    }

    #[test]
    fn hooks_are_parsed() {
        assert_eq!(hook("crash"), Some(Hook::Crash));
        assert_eq!(hook("flood 10"), Some(Hook::Flood(10)));
        assert_eq!(hook("sleep 5"), Some(Hook::Sleep(5)));
        assert_eq!(hook("last 5"), Some(Hook::Last(5)));
        assert_eq!(hook("flood many"), None);
        assert_eq!(hook("crash now"), None);
        assert_eq!(hook("hello"), None);
        assert_eq!(hook("stream 3"), Some(Hook::Stream(3)));
        assert_eq!(hook("stream 0"), None);
        assert_eq!(hook("stream 1001"), None);
        assert_eq!(stream_chunk(7, 20), "chunk 007 of 020. ");
    }
}
