//! After `berth image build`: the daemon running on the same data dir checks the new images
//! (its VM runtimes' probes boot the kernel) before it can run boxes on them. The build
//! returns only once that check is over, so the next command (`berth runtime ls`, `berth box
//! create --runtime qemu`) sees the outcome rather than the old "run `berth image build`".

use std::path::Path;
use std::time::{Duration, Instant};

use berth_server::runtimes::CHECKING_IMAGES;
use http::Method;
use serde::Deserialize;

use crate::client::Client;

/// Longer than any probe's own deadline (a TCG boot on a loaded host included).
const WAIT_AT_MOST: Duration = Duration::from_secs(180);
const POLL_EVERY: Duration = Duration::from_millis(200);

/// What we read of `GET /v1/runtimes`; lenient, as the API may add fields.
#[derive(Debug, Deserialize)]
struct Listed {
    runtimes: Vec<ListedRuntime>,
}

#[derive(Debug, Deserialize)]
struct ListedRuntime {
    name: String,
    #[serde(default)]
    reason: Option<String>,
}

/// The runtimes still being checked, by name.
fn checking(listed: &Listed) -> Vec<&str> {
    listed
        .runtimes
        .iter()
        .filter(|r| r.reason.as_deref() == Some(CHECKING_IMAGES))
        .map(|r| r.name.as_str())
        .collect()
}

/// Waits until the daemon on `data_dir` (if one runs) has checked the new images; a note
/// on stderr says what it waits for and, past [`WAIT_AT_MOST`], that it stopped waiting.
/// No daemon (no `berth.url`, or nothing answers it): nothing to wait for.
pub fn for_the_daemon(data_dir: &Path) -> anyhow::Result<()> {
    let Ok(target) = crate::target::resolve(None, None, data_dir) else {
        return Ok(());
    };
    let client = Client::new(target);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let deadline = Instant::now() + WAIT_AT_MOST;
        let mut said = false;
        loop {
            let listed: Listed = match client
                .json(Method::GET, "/v1/runtimes", None::<&()>, "a runtime list")
                .await
            {
                Ok(listed) => listed,
                Err(e) if e.is_transport() => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            let names = checking(&listed);
            if names.is_empty() {
                return Ok(());
            }
            if !said {
                eprintln!("waiting for the running daemon to check the new images ({})", names.join(", "));
                said = true;
            }
            if Instant::now() >= deadline {
                eprintln!(
                    "note: the daemon is still checking the new images after {}s; `berth runtime ls` says when it is done",
                    WAIT_AT_MOST.as_secs()
                );
                return Ok(());
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_runtimes_checking_new_images_are_waited_for() {
        let listed: Listed = serde_json::from_value(serde_json::json!({"runtimes": [
            {"name": "sandbox", "available": true, "reason": null},
            {"name": "qemu", "available": false, "reason": CHECKING_IMAGES},
            {"name": "firecracker", "available": false, "reason": "no firecracker binary"},
        ]}))
        .unwrap();
        assert_eq!(checking(&listed), ["qemu"]);
        let done: Listed = serde_json::from_value(serde_json::json!({"runtimes": [
            {"name": "qemu", "available": true},
        ]}))
        .unwrap();
        assert!(checking(&done).is_empty());
    }
}
