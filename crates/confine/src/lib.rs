//! How berth confines the processes it starts: one home for each piece, shared by
//! berth-init's box user processes, the image tools' runner and the VMM jail.
//!
//! - [`rule`] and [`tables`]: the seccomp rule table (system call, condition, errno), and
//!   the tables of each confined process, written from shared groups so they cannot drift;
//!   [`Filter`] compiles a table into BPF for this architecture (x32 aliases included) and
//!   installs it.
//! - [`Jail`]: a private mount namespace whose root is a fresh read-only tmpfs holding only
//!   what is listed (the host's `/usr` and its merged-usr links, devices, the caller's files),
//!   entered with `pivot_root`.
//! - [`PrivilegeDrop`]: an empty bounding set (every capability the kernel knows, each drop
//!   checked), no ambient capabilities or supplementary groups, then an unprivileged
//!   uid/gid and an empty inheritable set.
//!
//! The pieces that run between fork and exec ([`PreparedJail::enter`],
//! [`PrivilegeDrop::apply`], [`Filter::install`]) make system calls only: everything is
//! computed before the fork, and a failure is a [`StepError`] naming the step, with no
//! allocation. No async runtime: berth-init links this statically.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("berth-confine is built for x86_64 and aarch64 only");

pub mod caps;
mod error;
mod filter;
mod jail;
mod privileges;
pub mod rule;
pub mod syscall;
pub mod tables;
#[cfg(test)]
mod test_fork;

pub use error::{ConfineError, Step, StepError};
pub use filter::Filter;
pub use jail::{Access, Jail, PreparedJail, SYSTEM_DIRS};
pub use privileges::PrivilegeDrop;

#[doc(hidden)]
pub use libc as __libc;
