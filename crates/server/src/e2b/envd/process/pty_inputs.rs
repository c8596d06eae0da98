//! The input side of each PTY that a `Start` or `Connect` stream holds now, by box and
//! terminal: where `SendInput` writes while a stream is attached (a berth terminal takes
//! input only through its one attachment). The daemon's (`ctx.e2b`); a leaf.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use berth_protocol::BoxId;
use berth_runtime::guest_client::GuestStream;
use tokio::io::WriteHalf;

pub type PtyInput = Arc<tokio::sync::Mutex<WriteHalf<GuestStream>>>;

/// The input side of each PTY attached to a `Start` or `Connect` stream now, by box and
/// terminal.
#[derive(Default)]
pub struct PtyInputs(Mutex<HashMap<(BoxId, String), PtyInput>>);

impl std::fmt::Debug for PtyInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtyInputs").finish_non_exhaustive()
    }
}

impl PtyInputs {
    /// The input side of terminal `id` of `box_id`, while a stream holds it.
    pub fn get(&self, box_id: &BoxId, id: &str) -> Option<PtyInput> {
        self.lock().get(&(box_id.clone(), id.to_owned())).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(BoxId, String), PtyInput>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A PTY's input side in [`PtyInputs`], taken out when this is dropped (its stream ended).
pub struct Registration {
    inputs: Arc<PtyInputs>,
    key: (BoxId, String),
    input: PtyInput,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut attached = self.inputs.lock();
        // A later attachment of the same terminal may have replaced this one.
        if attached
            .get(&self.key)
            .is_some_and(|input| Arc::ptr_eq(input, &self.input))
        {
            attached.remove(&self.key);
        }
    }
}

/// Makes `input` the way into terminal `id` of `box_id` while the registration lives.
pub fn register(
    inputs: &Arc<PtyInputs>,
    box_id: &BoxId,
    id: &str,
    input: WriteHalf<GuestStream>,
) -> Registration {
    let key = (box_id.clone(), id.to_owned());
    let input = Arc::new(tokio::sync::Mutex::new(input));
    inputs.lock().insert(key.clone(), input.clone());
    Registration {
        inputs: Arc::clone(inputs),
        key,
        input,
    }
}
