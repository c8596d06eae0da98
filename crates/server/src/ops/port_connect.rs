//! A connection to `127.0.0.1:<port>` inside a box, for the ports proxy: wakes the box,
//! and while nothing listens on the port yet (a box just woken, a server still starting)
//! tries again with a short backoff, for at most `[ports] listen_wait_s`.

use std::time::Duration;

use berth_protocol::{BoxId, ErrorCode};
use berth_runtime::{GuestError, HandoffSender};
use tokio::time::Instant;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ports::dial::{self, AppStream};

/// The first pause after a refused connection; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// A port number as a client gave it: 1 to 65535.
pub fn parse_port(text: &str) -> Result<u16, OpError> {
    match text.parse::<u16>() {
        Ok(port) if port != 0 && text.bytes().all(|b| b.is_ascii_digit()) => Ok(port),
        _ => Err(OpError::InvalidPort {
            port: text.to_owned(),
        }),
    }
}

/// Connects to `port` in box `id` (named `name` in errors), waiting up to `wait` for it to
/// listen.
pub async fn connect(
    ctx: &Ctx,
    id: &BoxId,
    name: &str,
    port: u16,
    wait: Duration,
) -> Result<AppStream, OpError> {
    let deadline = Instant::now() + wait;
    let mut pause = FIRST_PAUSE;
    loop {
        let result = ctx
            .lifecycle()
            .with_guest(id, |client| async move {
                dial::dial(&client, port, HandoffSender::BoxInit).await
            })
            .await;
        match result {
            Err(OpError::Guest(e)) if nothing_listens(&e) => {
                if Instant::now() + pause > deadline {
                    return Err(OpError::PortNotListening {
                        name: name.to_owned(),
                        port,
                        waited_s: wait.as_secs(),
                    });
                }
                // Polling a port in another machine: there is no event to wait on.
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
            other => return other,
        }
    }
}

/// The agent's answer when its dial of the port was refused.
fn nothing_listens(e: &GuestError) -> bool {
    matches!(e, GuestError::Remote { body, .. } if body.error.code == ErrorCode::Unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_1_to_65535_in_plain_digits() {
        assert_eq!(parse_port("8000").unwrap(), 8000);
        assert_eq!(parse_port("65535").unwrap(), 65535);
        for bad in ["0", "65536", "+80", "-1", "", "80a", " 80"] {
            assert!(parse_port(bad).is_err(), "{bad:?}");
        }
    }
}
