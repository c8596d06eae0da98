//! A [`Table`] compiled into BPF for this architecture, and installed.

use std::collections::BTreeMap;

use seccompiler::{
    BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule,
};

use crate::error::{check, ConfineError, Step, StepError};
use crate::rule::{single_bits, Refusal, Table, When};
use crate::syscall::arch;

/// A compiled table: one BPF program per kind of refusal (a seccomp program has one answer
/// for what its rules match), each allowing what it does not list.
#[derive(Debug, Clone)]
pub struct Filter {
    programs: Vec<BpfProgram>,
}

impl Filter {
    /// Compiles `table` for [`arch::TARGET`], every number with its ABI aliases
    /// ([`arch::ALIASES`]).
    pub fn compile(table: &Table) -> Result<Filter, ConfineError> {
        compile(table).map_err(|source| ConfineError::Seccomp {
            table: table.name,
            source,
        })
    }

    /// How many programs [`Filter::install`] installs.
    pub fn program_count(&self) -> usize {
        self.programs.len()
    }

    /// Sets `no_new_privs`, then installs every program. Runs between fork and exec:
    /// system calls only, no allocation.
    pub fn install(&self) -> Result<(), StepError> {
        // SAFETY: integer-only prctl.
        check(
            unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }.into(),
            Step::NoNewPrivs,
        )?;
        for program in &self.programs {
            let fprog = libc::sock_fprog {
                len: program.len() as libc::c_ushort,
                filter: program.as_ptr() as *mut libc::sock_filter,
            };
            // SAFETY: `fprog` points into `program`, which lives until exec; the kernel
            // copies the program.
            let rc = unsafe {
                libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &fprog as *const libc::sock_fprog,
                )
            };
            check(rc.into(), Step::InstallSeccomp)?;
        }
        Ok(())
    }
}

fn compile(table: &Table) -> Result<Filter, BackendError> {
    let mut by_refusal: BTreeMap<Refusal, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
    for rule in table.rules() {
        let rules = seccomp_rules(rule.when)?;
        for alias in arch::ALIASES {
            by_refusal
                .entry(rule.refusal)
                .or_default()
                .entry(rule.call.nr | alias)
                .or_default()
                .extend(rules.iter().cloned());
        }
    }
    let programs = by_refusal
        .into_iter()
        .map(|(refusal, rules)| {
            SeccompFilter::new(
                rules,
                SeccompAction::Allow,
                SeccompAction::Errno(refusal.errno()),
                arch::TARGET,
            )
            .and_then(BpfProgram::try_from)
        })
        .collect::<Result<_, _>>()?;
    Ok(Filter { programs })
}

/// The rules (any one matching refuses the call; the conditions of one rule must all hold)
/// for `when`; none: always refused.
fn seccomp_rules(when: When) -> Result<Vec<SeccompRule>, BackendError> {
    let arg0 = |len, op, value| SeccompCondition::new(0, len, op, value);
    let conditions: Vec<Vec<SeccompCondition>> = match when {
        When::Always => return Ok(Vec::new()),
        When::Flags(mask) => vec![vec![arg0(
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(mask),
            mask,
        )?]],
        When::AnyFlag(mask) => single_bits(mask)
            .map(|bit| {
                arg0(SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(bit), bit).map(|c| vec![c])
            })
            .collect::<Result<_, _>>()?,
        // An `int`: only the low half counts (the kernel ignores the upper one too).
        When::FamilyIs(family) => vec![vec![arg0(
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            family as u64,
        )?]],
        When::FamilyNotIn(families) => vec![families
            .iter()
            .map(|&f| arg0(SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, f as u64))
            .collect::<Result<_, _>>()?],
    };
    conditions.into_iter().map(SeccompRule::new).collect()
}

#[cfg(test)]
mod tests;
