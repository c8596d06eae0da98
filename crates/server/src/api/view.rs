//! The public JSON shape of a box (docs/api.md).

use berth_store::{BoxRecord, BoxState};
use serde::Serialize;
use time::format_description::well_known::Rfc3339;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BoxView {
    pub id: String,
    pub name: String,
    pub template: String,
    /// `stopped`, `starting`, `running`, `stopping`, `paused` or `failed`.
    #[schema(value_type = String)]
    pub state: BoxState,
    pub limits: LimitsView,
    pub idle_timeout_s: u64,
    pub created_at: String,
    pub state_reason: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LimitsView {
    pub memory_mib: u64,
    pub pids: u64,
    pub cpus: f64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BoxListView {
    pub boxes: Vec<BoxView>,
}

impl From<BoxRecord> for BoxView {
    fn from(r: BoxRecord) -> Self {
        BoxView {
            id: r.id.to_string(),
            name: r.name,
            template: r.template,
            state: r.state,
            limits: LimitsView {
                memory_mib: r.memory_mib,
                pids: r.pids,
                cpus: r.cpus,
            },
            idle_timeout_s: r.idle_timeout_s,
            created_at: r.created_at.format(&Rfc3339).unwrap_or_default(),
            state_reason: r.state_reason,
        }
    }
}
