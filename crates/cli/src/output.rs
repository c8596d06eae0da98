//! What a command prints with `--json`: the daemon's answer, as it came (pretty-printed),
//! so scripts read the same fields as docs/api.md. Streams print one JSON value a line.

use std::io::Write;

use anyhow::Context as _;
use serde::Serialize;

/// Writes `value` as pretty JSON and a newline.
pub fn json(out: &mut impl Write, value: &impl Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value).context("encoding JSON")?;
    writeln!(out, "{text}").context("writing to stdout")
}

/// Writes `value` as one line of JSON (NDJSON), flushed at once for a reader that follows.
pub fn json_line(out: &mut impl Write, value: &impl Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string(value).context("encoding JSON")?;
    writeln!(out, "{text}").context("writing to stdout")?;
    out.flush().context("writing to stdout")
}
