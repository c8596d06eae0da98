//! Processes that outlive their request, and what keeps a box awake (protocol version 3).
//!
//! | call | method and path | response |
//! |---|---|---|
//! | [`crate::guest::Call::Busy`] | `GET /v1/busy` | [`Busy`] |

use serde::{Deserialize, Serialize};

/// Work inside the box that keeps it awake, as `berth-init` sees it. The host's idle
/// reclaimer asks before it stops a box that no call has used for its idle timeout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Busy {
    /// Terminals attached now, or detached and still within their grace period.
    #[serde(default)]
    pub terminals: u32,
    /// Background processes running that asked to keep the box awake.
    #[serde(default)]
    pub processes: u32,
}

impl Busy {
    pub fn is_busy(&self) -> bool {
        self.terminals > 0 || self.processes > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn version_3_busy_schema_is_frozen() {
        let busy = Busy {
            terminals: 1,
            processes: 2,
        };
        assert_eq!(
            serde_json::to_value(busy).unwrap(),
            json!({"terminals":1,"processes":2})
        );
        assert!(busy.is_busy());
        assert!(!serde_json::from_value::<Busy>(json!({})).unwrap().is_busy());
    }
}
