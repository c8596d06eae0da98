//! Whether a service is ready: its TCP port on 127.0.0.1 accepts a connection, or its ready
//! command exits 0. Checked from soon after the start, less often as time goes on, until
//! the service's ready timeout.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use berth_protocol::guest::ExecRequest;
use berth_protocol::service::{ReadyCheck, ServiceConfig};
use tokio::time::Instant;

use crate::exec::pump::{pump, Pipe, Sink};
use crate::exec::Executor;

const FIRST_POLL: Duration = Duration::from_millis(20);
const POLL_CAP: Duration = Duration::from_millis(500);
/// One run of a ready command may take a tenth of the service's ready window, and at least
/// this, before it counts as "not yet": a check that hangs must not use up the window, and
/// one that looks at a slow service (a desktop under TCG: seconds per program) must not be
/// cut off each time.
const COMMAND_LIMIT_MIN: Duration = Duration::from_secs(10);

/// `true` once ready; `false` when `limit` passed first. Pending forever for a service
/// with no check (its caller does not poll it then).
pub async fn wait(exec: &Executor, config: &ServiceConfig, limit: Duration) -> bool {
    let Some(check) = &config.ready else {
        return std::future::pending().await;
    };
    let deadline = Instant::now() + limit;
    let run_limit = command_limit(limit);
    let mut poll = FIRST_POLL;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let once = async {
            match check {
                ReadyCheck::Port(port) => port_open(*port).await,
                ReadyCheck::Command(argv) => command_succeeds(exec, config, argv, run_limit).await,
            }
        };
        if let Ok(true) = tokio::time::timeout(left, once).await {
            return true;
        }
        tokio::time::sleep(poll.min(deadline.saturating_duration_since(Instant::now()))).await;
        poll = (poll * 2).min(POLL_CAP);
    }
}

/// How long one run of a ready command may take, in a ready window of `window`.
fn command_limit(window: Duration) -> Duration {
    (window / 10).max(COMMAND_LIMIT_MIN)
}

async fn port_open(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    tokio::net::TcpStream::connect(addr).await.is_ok()
}

/// Runs the ready command as the service's user, in its directory, with its environment;
/// its output is read and dropped; a run longer than `limit` is ended and fails.
async fn command_succeeds(
    exec: &Executor,
    config: &ServiceConfig,
    argv: &[String],
    limit: Duration,
) -> bool {
    let request = ExecRequest {
        argv: argv.to_vec(),
        env: config.env.clone(),
        cwd: config.cwd.clone(),
        user: config.user,
        stdin: None,
        timeout_ms: Some(limit.as_millis() as u64),
    };
    let Ok(prepared) = exec.prepare_request(request) else {
        return false;
    };
    let Ok(mut running) = exec.spawn(&prepared) else {
        return false;
    };
    let pid = running.pid;
    let exit = pump(&mut running, prepared.timeout(), &mut Dropped).await;
    exec.reaper.forget_group_if_empty(pid);
    exit.is_some_and(|e| berth_protocol::service::exit_is_clean(&e))
}

/// Output nobody reads.
struct Dropped;

impl Sink for Dropped {
    async fn output(&mut self, _: Pipe, _: &[u8]) -> bool {
        true
    }

    async fn gone(&self) {
        std::future::pending().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ready_command_may_run_a_tenth_of_its_window_and_at_least_ten_seconds() {
        let s = Duration::from_secs;
        assert_eq!(command_limit(s(300)), s(30));
        assert_eq!(command_limit(s(60)), s(10));
        assert_eq!(command_limit(s(1)), s(10));
    }
}
