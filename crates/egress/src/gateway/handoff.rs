//! The first read of each stream on a box's listener: a socket the box's init handed over
//! (`berth_handoff`), or the first byte of a plain stream.
//!
//! In a sandbox, berth-init (the box's PID 1, on the host's kernel) hands each connection it
//! accepted on 127.0.0.1:443 or :3128 to the gateway as a socket and keeps no copy: the
//! gateway then reads the CONNECT head or the ClientHello from that socket and splices it
//! like any other box side. A VM's streams, and those of a berth-init that is not PID 1, are
//! plain bytes; their first byte is kept. A socket from anyone but the box's init (box root
//! connecting to the egress socket itself) is refused and closed unread: such a sender could
//! keep a duplicate and block a host thread in `splice` (see `berth_handoff`).

use std::sync::atomic::{AtomicU64, Ordering};

use berth_handoff::{HandoffError, Sender};
use berth_protocol::BoxId;

/// One box listener's handoff setting, and how many handoffs it has refused.
#[derive(Debug)]
pub(crate) struct Handoffs {
    pub(crate) from: Sender,
    refused: AtomicU64,
}

impl Handoffs {
    pub(crate) fn new(from: Sender) -> Self {
        Handoffs {
            from,
            refused: AtomicU64::new(0),
        }
    }

    /// Logs a refused handoff: the first of a box at warn level (something in the box is
    /// not its init and tried to pass a socket), every later one at debug. Each is also a
    /// deny line in the box's audit log, so a box that retries in a loop cannot flood the
    /// daemon's log.
    pub(crate) fn refused(&self, box_id: &BoxId, error: &HandoffError) {
        if self.refused.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!(
                %box_id, %error,
                "egress: refused a socket handed over by the box; later refusals of this box are logged at debug level (each is an audit line)"
            );
        } else {
            tracing::debug!(%box_id, %error, "egress: refused a socket handed over by the box");
        }
    }
}
