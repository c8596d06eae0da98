//! The log of a long-running `berth` process (`berth up`): lines on stderr, filtered by
//! `RUST_LOG` (default `info`), as text for a person or as one JSON object a line for a
//! log pipeline (`--log-format json`, docs/metrics.md):
//!
//! ```json
//! {"timestamp":"2025-01-01T12:00:00.000000Z","level":"INFO","target":"berth_server::api",
//!  "fields":{"message":"request","method":"POST","status":200},
//!  "span":{"request_id":"req_…","box_id":"bx_…","name":"request"}}
//! ```
//! `span` holds the fields of the span the line was logged in: a request's `request_id`,
//! and `box_id` once the request found its box (`berth_server::api::request_id`).

use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One line a record, for a person (colours on a terminal).
    #[default]
    Text,
    /// One JSON object a line: timestamp, level, target, fields (the message among them),
    /// and the current span's fields (request_id, box_id).
    Json,
}

/// Sends the process's log lines to stderr in `format`. A second call (never in practice)
/// changes nothing: logging is best-effort either way.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}
