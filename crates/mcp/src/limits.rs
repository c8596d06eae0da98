//! Every bound of the MCP server, in one place. Tool results go to a model, whose context is
//! small and costly: each result is cut to a size a model reads comfortably, with a note
//! saying what was left out and how to get it. What a client sends is bounded too, so no
//! client makes the daemon (or `berth mcp`) buffer without bound.

/// The largest MCP message a client may send: a Streamable HTTP request body, or one line on
/// stdio. It fits a `box_write_file` of [`MAX_WRITE_BYTES`] in base64 with room to spare.
pub const MAX_MCP_MESSAGE_BYTES: usize = 2 * 1024 * 1024;

/// The most a `box_write_file` writes (the text, or the bytes its base64 decodes to). Larger
/// files are better copied with `berth cp` than pushed through a model.
pub const MAX_WRITE_BYTES: usize = 1024 * 1024;

/// How much of a command's output `box_exec` keeps: the first [`EXEC_HEAD_BYTES`] and the
/// last [`EXEC_TAIL_BYTES`] of stdout, and as much of stderr; the middle is counted, not kept.
pub const EXEC_HEAD_BYTES: usize = 12 * 1024;
pub const EXEC_TAIL_BYTES: usize = 4 * 1024;

/// `box_exec`'s default and longest `timeout_s`. Longer work belongs in a background process
/// (`berth exec --background`), not in a tool call a client waits on.
pub const EXEC_DEFAULT_TIMEOUT_S: u64 = 60;
pub const EXEC_MAX_TIMEOUT_S: u64 = 600;

/// `box_read_file`'s default and largest `max_bytes`.
pub const READ_DEFAULT_BYTES: u64 = 32 * 1024;
pub const READ_MAX_BYTES: u64 = 128 * 1024;

/// How many entries `box_list_files` and `box_list` show.
pub const MAX_LISTED_ENTRIES: usize = 200;

/// How much event text one `box_events` result holds, and one event's line at most.
pub const EVENTS_BUDGET_BYTES: usize = 32 * 1024;
pub const EVENT_LINE_BYTES: usize = 2 * 1024;

/// How much of a turn's answer `box_send_message` returns.
pub const ANSWER_BYTES: usize = 32 * 1024;

/// `box_send_message`'s default and longest wait for the turn's answer.
pub const SEND_DEFAULT_TIMEOUT_S: u64 = 120;
pub const SEND_MAX_TIMEOUT_S: u64 = 600;

/// The most of a JSON answer the tools read (an event page holds up to 4 MiB plus one event of
/// up to 8 MiB); past it the tool fails with a clear error rather than read on.
pub const MAX_JSON_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// The longest line of a stream the tools read (an exec frame, an SSE line of an event). A
/// longer SSE line is skipped; a longer exec frame ends the call with an error.
pub const MAX_STREAM_LINE_BYTES: usize = 1024 * 1024;

/// The most of an error answer kept (berth's error bodies are small).
pub const MAX_ERROR_ANSWER_BYTES: usize = 64 * 1024;
