//! The boot-token handover (`GuestClient::rotate_token`): what a restored or claimed box
//! uses to become a new boot without rebooting.

use std::time::{SystemTime, UNIX_EPOCH};

use berth_protocol::guest::BoxUser;
use berth_runtime::Limits;

use crate::common::{self, run_ok, Fixture};
use crate::GRACE;

/// After a rotation the old token is refused at once and the new one opens the channel;
/// in a VM the guest clock is set to the host's (a sandbox shares the host's clock, so
/// there it must be left alone).
pub async fn rotate_token_refuses_the_old_token_and_sets_the_clock(fx: &Fixture) {
    let spec = fx.spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    if fx.is_vm() {
        // A guest clock far in the past, as a snapshot restored a day later would have.
        run_ok(&client, &["date", "-s", "@1000000000"], BoxUser::Root).await;
    }
    let new = common::next_boot(&spec);
    client.rotate_token(&new.boot_token).await.expect("rotate");
    common::assert_old_token_refused(fx.runtime.as_ref(), &spec).await;
    let fresh = fx.runtime.channel(&new.id, &new.boot_token);
    let guest_s: u64 = run_ok(&fresh, &["date", "+%s"], BoxUser::User)
        .await
        .trim()
        .parse()
        .expect("date +%s");
    let host_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        host_s.abs_diff(guest_s) <= 5,
        "guest clock {guest_s} against the host's {host_s}"
    );
    // The new token cannot be swapped for junk, and a refused swap changes nothing.
    let bad = berth_runtime::BootToken::from_random([0; 32]);
    let stale = fx.runtime.channel(&spec.id, &spec.boot_token);
    assert!(stale.rotate_token(&bad).await.is_err());
    fresh.info().await.expect("the new token still works");
    fx.runtime.stop(&spec.id, GRACE).await.unwrap();
}
