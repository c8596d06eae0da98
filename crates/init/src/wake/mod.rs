//! Scheduled wakeups from inside the box: `berth-wake` is berth-init called by that name
//! ([`cli`]); PID 1 serves it on a Unix socket and relays each request to the host as a
//! `wake_request` event, handing the host's `POST /v1/wake/reply` back to it ([`relay`]).
//! See `berth_protocol::wake`.

pub mod cli;
pub mod relay;

pub use relay::reply;

/// Whether this process was started as `berth-wake` (argv[0]'s file name).
pub fn called_as_wake() -> bool {
    std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| {
            p.file_name()
                .map(|n| n == berth_protocol::wake::WAKE_COMMAND)
        })
        .unwrap_or(false)
}
