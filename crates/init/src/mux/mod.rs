//! Many byte streams over one ordered byte stream: the guest channel over a virtio-serial
//! port, where QEMU cannot migrate vhost-user-vsock. Each end is a [`Link`]: the guest's
//! over its port file, the host's (`berth-init bridge`) over QEMU's chardev socket. Streams
//! behave like vsock streams (opened to a port, accepted by a [`MuxListener`], half-closed
//! with a write shutdown), so the code above them does not know which carries it.
//!
//! Bounded everywhere: each stream has a 256 KiB window per direction returned with
//! CREDIT as its reader consumes, so a stream whose reader is slow never blocks another;
//! the frames waiting for the writer are bounded ([`QUEUE_BYTES`] of DATA); each side opens
//! at most [`MAX_STREAMS`] streams.
//!
//! Restore: a host end starts every link with a run of zeros and a HELLO and ignores
//! everything before the guest's HELLO; the guest resets all its streams on every HELLO
//! and answers in kind (the wire format and why the zero run works: `frame`).

mod frame;
mod link;
mod state;
mod stream;
#[cfg(test)]
mod tests;

pub use self::link::Link;
pub use self::stream::{MuxListener, MuxStream};

/// Credit each stream starts with, per direction.
pub const WINDOW: u32 = 256 * 1024;
/// Streams one side may have open at once; an OPEN beyond that is refused.
pub const MAX_STREAMS: usize = 256;
/// DATA bytes waiting for the writer, over all streams, before writers wait.
pub const QUEUE_BYTES: usize = 256 * 1024;

/// Which end of the link this is: they differ in who syncs and who scans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The bridge: opens even ids, writes SYNC + HELLO first, scans for the guest's HELLO.
    Host,
    /// berth-init in the VM: opens odd ids, answers each HELLO, never ends on bad input.
    Guest,
}

/// Why a link ended.
#[derive(Debug, thiserror::Error)]
pub enum MuxError {
    #[error("the peer broke the serial channel protocol")]
    Violation(#[from] Violation),
    #[error("cannot read from the serial channel")]
    Read(#[source] std::io::Error),
    #[error("cannot write to the serial channel")]
    Write(#[source] std::io::Error),
}

/// What the peer did wrong. A host link ends on it; a guest link resets its streams.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    #[error("unknown frame kind {kind:#04x}")]
    UnknownKind { kind: u8 },
    #[error("a frame of {len} bytes (the limit is 65536)")]
    Oversized { len: u32 },
    #[error("a frame of kind {kind} with a {len}-byte payload")]
    BadLength { kind: u8, len: u32 },
    #[error("a HELLO with the wrong stream, magic or version")]
    BadHello,
    #[error("a frame for stream {id} before the HELLO")]
    BeforeHello { id: u32 },
    #[error("a frame for stream {id}, which is not open")]
    UnknownStream { id: u32 },
    #[error("an OPEN of stream {id}, which the peer may not open or is already open")]
    BadOpen { id: u32 },
    #[error("stream {id} got {len} bytes with {allowed} bytes of window left")]
    OverWindow { id: u32, len: u32, allowed: u32 },
    #[error("stream {id} got DATA after its SHUTDOWN")]
    DataAfterShutdown { id: u32 },
    #[error("stream {id} got credit beyond its window")]
    OverCredit { id: u32 },
    #[error("the peer left more than {max} streams unanswered")]
    TooManyStreams { max: usize },
}
