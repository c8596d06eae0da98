//! The `mcp-sdk` part: the official MCP Python SDK (PyPI `mcp`, [`PINNED`]), unmodified, in a
//! venv under the workspace's `target/mcp-sdk`, made by `scripts/install-deps.sh --tests`
//! (which keeps it there, so a rerun installs nothing). Its client drives berth's MCP server.

use std::path::PathBuf;

/// The SDK version berth's MCP server is tested against (`scripts/install-deps.sh` pins the
/// same).
pub const PINNED: &str = "2.3.0";

/// The venv's Python, with the pinned SDK importable, or why there is none (for
/// [`crate::skip`] with `mcp-sdk`).
pub fn find() -> Result<PathBuf, String> {
    crate::pinned_python::check(
        crate::pinned_python::target_dir("mcp-sdk/venv/bin/python"),
        "mcp",
        "mcp",
        PINNED,
        "scripts/install-deps.sh --tests makes it",
    )
}
