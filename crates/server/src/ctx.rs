//! What every operation works with.

use std::sync::Arc;
use std::time::Duration;

use berth_runtime::Runtime;
use berth_store::Store;

use crate::boxes::BoxTable;

/// How long a stopping box gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Ctx {
    pub store: Arc<Store>,
    pub runtime: Arc<dyn Runtime>,
    pub boxes: Arc<BoxTable>,
}
