//! berth's MCP server: tools that let a model create boxes, run commands, move files and talk
//! to a box's agent (docs/mcp.md).
//!
//! The tools are written once, against berth's own HTTP API behind a narrow trait
//! ([`Api`]): `berth mcp` (stdio) implements it with an HTTP client to the daemon, and the
//! daemon's `/mcp` (Streamable HTTP) with a call into its own router. So a tool can do only
//! what the caller's API key may do, and its errors are the API's.
//!
//! - [`api`]: the trait and its request, answer and caller types;
//! - [`catalog`]: the tools' names, descriptions and schemas, and their dispatch;
//! - [`box_tools`], [`exec_tool`], [`file_tools`], [`memory_tools`], [`message_tools`]: the
//!   tools;
//! - [`answer`]: reading answers bounded; [`truncate`]: cutting output to a model's size;
//!   [`limits`]: every bound;
//! - [`handler`]: the MCP server; [`serve`]: stdio and Streamable HTTP.

pub mod answer;
pub mod api;
pub mod box_tools;
pub mod calls;
pub mod catalog;
pub mod error;
pub mod exec_tool;
pub mod file_tools;
pub mod handler;
pub mod limits;
pub mod memory_tools;
pub mod message_tools;
pub mod serve;
pub mod truncate;

pub use api::{
    AnswerBody, Api, ApiAnswer, ApiRequest, BoxError, Caller, RequestBody, TransportError,
};
pub use error::ToolError;
pub use handler::BerthMcp;
