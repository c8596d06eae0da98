//! The MCP server itself: lists the tools and runs a call on the caller's behalf. The one
//! place a [`ToolError`] becomes what the client sees: a tool result marked as an error,
//! whose text (with its causes) a model can read and act on.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};

use crate::api::{Api, Caller};
use crate::calls::Cx;
use crate::catalog;
use crate::error::ToolError;

const INSTRUCTIONS: &str = "berth gives each agent its own persistent Linux computer, a box. \
    Create one with box_create (or pick one from box_list), then run commands (box_exec), \
    read and write its files, and talk to the agent inside it (box_send_message). A box \
    sleeps when idle and wakes by itself on the next call; its files persist.";

/// berth's tools, acting for a caller: the one given (stdio), or the one the daemon's
/// `/mcp` middleware put in each HTTP request's extensions.
#[derive(Clone)]
pub struct BerthMcp {
    api: Arc<dyn Api>,
    caller: Option<Caller>,
}

impl BerthMcp {
    /// Every call acts for `caller` (`berth mcp`: one user, one key).
    pub fn for_caller(api: Arc<dyn Api>, caller: Caller) -> BerthMcp {
        BerthMcp {
            api,
            caller: Some(caller),
        }
    }

    /// Each call acts for the [`Caller`] in its HTTP request's extensions (`/mcp`).
    pub fn per_request(api: Arc<dyn Api>) -> BerthMcp {
        BerthMcp { api, caller: None }
    }

    fn caller_of(&self, context: &RequestContext<RoleServer>) -> Result<Caller, ToolError> {
        let from_request = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>());
        from_request
            .or(self.caller.as_ref())
            .cloned()
            .ok_or(ToolError::NoCaller)
    }

    async fn run(
        &self,
        spec: &'static catalog::ToolSpec,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<String, ToolError> {
        let caller = self.caller_of(context)?;
        let cx = Cx {
            api: &*self.api,
            caller: &caller,
        };
        catalog::run(cx, spec, request.arguments.unwrap_or_default()).await
    }
}

impl ServerHandler for BerthMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("berth", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(catalog::listed()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // An unknown tool is the client's protocol error; anything after is the tool's.
        let Some(spec) = catalog::find(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!("no tool named {:?}: tools/list shows them", request.name),
                None,
            ));
        };
        // A cancelled call (or a closed HTTP request) drops the work, and with it any
        // stream it had open to the daemon.
        let outcome = tokio::select! {
            outcome = self.run(spec, request, &context) => outcome,
            () = context.ct.cancelled() => {
                return Err(ErrorData::internal_error("the call was cancelled", None));
            }
        };
        let result = match outcome {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(err) => {
                let text = with_causes(&err);
                tracing::debug!(tool = spec.name, error = %text, "MCP tool call failed");
                CallToolResult::error(vec![ContentBlock::text(text)])
            }
        };
        Ok(result.into())
    }
}

/// The error and its causes, `a: b: c`, each said once.
pub fn with_causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
