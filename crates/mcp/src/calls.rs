//! What every tool holds while it runs: the API and the caller it acts for, and the paths of
//! a box's calls.

use berth_basics::path_segment;

use crate::api::{Api, ApiAnswer, ApiRequest, Caller};
use crate::error::ToolError;

/// One tool call's view of berth.
#[derive(Clone, Copy)]
pub struct Cx<'a> {
    pub api: &'a dyn Api,
    pub caller: &'a Caller,
}

impl Cx<'_> {
    pub async fn call(&self, request: ApiRequest) -> Result<ApiAnswer, ToolError> {
        Ok(self.api.call(self.caller, request).await?)
    }
}

/// `/v1/boxes/{ref}{suffix}`, the box named by a tool's `box` argument.
pub fn box_path(box_ref: &str, suffix: &str) -> String {
    format!("/v1/boxes/{}{suffix}", path_segment(box_ref))
}
