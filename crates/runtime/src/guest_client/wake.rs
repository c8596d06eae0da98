//! The host's answer to a box's own wakeup request (`berth_protocol::wake`).

use berth_protocol::guest::Call;
use berth_protocol::wake::WakeReply;
use bytes::Bytes;
use http::Method;

use super::{GuestClient, GuestError};

impl GuestClient {
    /// Hands the answer to the `berth-wake` waiting on `reply.request_id`.
    pub async fn wake_reply(&self, reply: &WakeReply) -> Result<(), GuestError> {
        let body = Bytes::from(serde_json::to_vec(reply)?);
        self.send(Call::WakeReply, Method::POST, "/v1/wake/reply", body)
            .await?;
        Ok(())
    }
}
