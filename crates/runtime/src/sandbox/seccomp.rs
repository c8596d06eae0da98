//! The bundle-level seccomp filter, written as runc's OCI profile from the one table
//! [`berth_confine::tables::SANDBOX_BOX`] (its doc says what is refused and why):
//! everything is allowed except the calls a box never needs and that widen the kernel's
//! attack surface. berth-init adds a stricter filter of its own for the user's processes.
//!
//! The profile names calls, and runc resolves each name for every architecture listed
//! (this one and its compat ABIs), so it also names the calls that exist only in a compat
//! ABI or are gone from this one ([`NAMED_ONLY`]): the table holds this architecture's
//! numbers.

use berth_confine::rule::{single_bits, Refusal, Rule, When};
use berth_confine::tables::SANDBOX_BOX;
use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArg, LinuxSeccompArgBuilder,
    LinuxSeccompBuilder, LinuxSeccompOperator, LinuxSyscall, LinuxSyscallBuilder,
};

/// Refused with `EPERM` by name only: `stime` and `umount` exist in i386 alone, and
/// `create_module` and `get_kernel_syms` are gone from the kernels berth runs on (`uselib`
/// too, outside x86).
pub const NAMED_ONLY: &[&str] = &[
    "create_module",
    "get_kernel_syms",
    "stime",
    "umount",
    #[cfg(not(target_arch = "x86_64"))]
    "uselib",
];

/// The filter for this host's architecture (and its compat ABIs).
pub fn filter() -> LinuxSeccomp {
    LinuxSeccompBuilder::default()
        .default_action(LinuxSeccompAction::ScmpActAllow)
        .architectures(architectures())
        .syscalls(rules())
        .build()
        .expect("a seccomp filter from fixed parts")
}

fn architectures() -> Vec<Arch> {
    if cfg!(target_arch = "x86_64") {
        vec![Arch::ScmpArchX86_64, Arch::ScmpArchX86, Arch::ScmpArchX32]
    } else if cfg!(target_arch = "aarch64") {
        vec![Arch::ScmpArchAarch64, Arch::ScmpArchArm]
    } else {
        vec![Arch::ScmpArchNative]
    }
}

/// The table's rules as OCI rules: the unconditional ones grouped by errno, one rule per
/// condition otherwise (OCI rules with one argument each, which every libseccomp takes).
fn rules() -> Vec<LinuxSyscall> {
    let always = |refusal: Refusal| -> Vec<String> {
        let table = SANDBOX_BOX
            .rules()
            .filter(|r| r.when == When::Always && r.refusal == refusal)
            .map(|r| r.call.name());
        let named_only = (refusal == Refusal::Eperm).then_some(NAMED_ONLY.iter().copied());
        let mut names: Vec<String> = table
            .chain(named_only.into_iter().flatten())
            .map(String::from)
            .collect();
        names.sort();
        names
    };
    let mut rules: Vec<LinuxSyscall> = [Refusal::Eperm, Refusal::Enosys, Refusal::Eafnosupport]
        .into_iter()
        .map(|refusal| (always(refusal), refusal))
        .filter(|(names, _)| !names.is_empty())
        .map(|(names, refusal)| syscall(names, refusal, None))
        .collect();
    for rule in SANDBOX_BOX.rules().filter(|r| r.when != When::Always) {
        rules.extend(conditional(rule));
    }
    rules
}

fn syscall(names: Vec<String>, refusal: Refusal, arg: Option<LinuxSeccompArg>) -> LinuxSyscall {
    let rule = LinuxSyscallBuilder::default()
        .names(names)
        .action(LinuxSeccompAction::ScmpActErrno)
        .errno_ret(refusal.errno());
    let rule = match arg {
        Some(arg) => rule.args(vec![arg]),
        None => rule,
    };
    rule.build().expect("a syscall rule from fixed parts")
}

/// `(arg0 & mask) == value`.
fn masked_eq(mask: u64, value: u64) -> LinuxSeccompArg {
    LinuxSeccompArgBuilder::default()
        .index(0usize)
        .value(mask)
        .value_two(value)
        .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
        .build()
        .expect("a seccomp argument from fixed parts")
}

/// The OCI rules (any one refuses the call) of a conditional table rule.
fn conditional(rule: Rule) -> Vec<LinuxSyscall> {
    let names = || vec![rule.call.name().to_owned()];
    let args: Vec<LinuxSeccompArg> = match rule.when {
        When::Always => Vec::new(),
        When::Flags(mask) => vec![masked_eq(mask, mask)],
        When::AnyFlag(mask) => single_bits(mask).map(|bit| masked_eq(bit, bit)).collect(),
        // The family compared as the kernel reads it (an int).
        When::FamilyIs(family) => vec![masked_eq(u64::from(u32::MAX), family as u64)],
        // Not stated rule by rule: one rule refuses a call when every argument comparison
        // holds, and libseccomp takes one comparison per argument. Allowing nothing of the
        // call is the safe reading; the box table has no such rule (tested).
        When::FamilyNotIn(_) => Vec::new(),
    };
    if args.is_empty() {
        return vec![syscall(names(), rule.refusal, None)];
    }
    args.into_iter()
        .map(|arg| syscall(names(), rule.refusal, Some(arg)))
        .collect()
}

#[cfg(test)]
mod tests;
