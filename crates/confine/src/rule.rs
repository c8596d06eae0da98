//! The shape of a seccomp table: which calls are refused, when, and with which errno.
//!
//! A table is a list of [`Entry`]s, each a group of calls (often a shared one from
//! [`crate::tables::groups`]) with one condition and one refusal; everything not listed is
//! allowed. Each call appears in a table once: two rules for one number would be merged.

use crate::syscall::Syscall;

/// What a refused call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// Not permitted: the answer of a kernel that refuses the caller.
    Eperm,
    /// Not implemented: callers fall back (libc from `clone3` to `clone`, io_uring users to
    /// plain calls).
    Enosys,
    /// Family not supported: what a kernel without the socket family says.
    Eafnosupport,
}

impl Refusal {
    pub fn errno(self) -> u32 {
        let errno = match self {
            Refusal::Eperm => libc::EPERM,
            Refusal::Enosys => libc::ENOSYS,
            Refusal::Eafnosupport => libc::EAFNOSUPPORT,
        };
        errno as u32
    }
}

/// When a listed call is refused. Every condition reads argument 0 (the flags of
/// `clone`/`unshare`, the family of `socket`/`socketpair`; `clone`'s flags are argument 0 on
/// x86_64 and aarch64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    Always,
    /// Every one of these flag bits is set.
    Flags(u64),
    /// Any one of these flag bits is set.
    AnyFlag(u64),
    /// The family (an `int`: only the low half counts, as for the kernel) is this one.
    FamilyIs(i32),
    /// The family is none of these.
    FamilyNotIn(&'static [i32]),
}

/// The single bits of `mask`, lowest first: a [`When::AnyFlag`] is one rule per bit.
pub fn single_bits(mask: u64) -> impl Iterator<Item = u64> {
    (0..64).map(|i| 1u64 << i).filter(move |b| mask & b != 0)
}

/// A group of calls refused under one condition with one errno.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub calls: &'static [Syscall],
    pub when: When,
    pub refusal: Refusal,
}

/// Refuses `calls` `when` the condition holds, with `refusal`.
pub const fn refuse(calls: &'static [Syscall], when: When, refusal: Refusal) -> Entry {
    Entry {
        calls,
        when,
        refusal,
    }
}

/// One refused call: a table flattened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub call: Syscall,
    pub when: When,
    pub refusal: Refusal,
}

/// A named seccomp table.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    pub name: &'static str,
    pub entries: &'static [Entry],
}

impl Table {
    /// Every refused call, in the table's order.
    pub fn rules(&self) -> impl Iterator<Item = Rule> + '_ {
        self.entries.iter().flat_map(|entry| {
            entry.calls.iter().map(move |&call| Rule {
                call,
                when: entry.when,
                refusal: entry.refusal,
            })
        })
    }

    /// The rule for the call numbered `nr`, if the table has one.
    pub fn find(&self, nr: i64) -> Option<Rule> {
        self.rules().find(|rule| rule.call.nr == nr)
    }
}
