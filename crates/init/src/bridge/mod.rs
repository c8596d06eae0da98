//! `berth-init bridge --serial PATH --uds-path PATH`: the host end of a `qemu` box's serial
//! channel (docs/runtimes.md, "The serial channel"; the mux engine is [`crate::mux`]). It runs on the host, one per
//! VM, as an ordinary unprivileged process, never as a box's PID 1.
//!
//! It listens on two Unix sockets, both created (mode 0600) before anything is accepted:
//! - `--serial`: QEMU's `virtserialport` chardev connects here as a client. The bridge
//!   drives a host-role [`Link`] over that one connection and exits when it ends.
//! - `--uds-path`: the hybrid vsock interface berth's host code speaks with Firecracker
//!   too ([`host_clients`]): `CONNECT <port>\n`, `OK <n>\n`,
//!   then the stream. A stream the guest opens to port P goes to `<uds-path>_P`
//!   ([`guest_opens`]).
//!
//! Exit status ([`cli`]): 0 when QEMU's connection ended (closed or reset), 1 when the link broke (a protocol violation
//! or an I/O error; one line on stderr names it) or a socket could not be made, 2 usage.

mod cli;
mod connect_line;
mod guest_opens;
mod host_clients;
mod serve;
mod sockets;
mod splice;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

use crate::mux::MuxError;

pub use self::cli::main;
pub use self::serve::Bridge;

/// Why the bridge stopped other than by QEMU's connection ending.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error("cannot listen on {path}")]
    Listen {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot accept QEMU's connection on {path}")]
    AcceptSerial {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot listen for the guest's streams to port {port}")]
    GuestListen {
        port: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("the serial link broke")]
    Link(#[source] MuxError),
    #[error("the serial link's task failed")]
    LinkTask(#[source] tokio::task::JoinError),
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
}

/// The command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub serial: PathBuf,
    pub uds_path: PathBuf,
}

/// Whether this process was started as `berth-init bridge …`. Never as PID 1: a box's init
/// is never a bridge, whatever words reach its command line.
pub fn called_as_bridge() -> bool {
    std::process::id() != 1
        && std::env::args_os()
            .nth(1)
            .is_some_and(|a| a == cli::SUBCOMMAND)
}
