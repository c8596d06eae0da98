//! A template's `[egress]` table: the allowlist and credential rules, checked by
//! [`EgressPolicy::validated`] and pointed back at their lines. No table: an empty policy
//! (nothing leaves the box).

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use super::source::Source;
use super::{TemplateError, TemplateErrorKind};
use crate::egress::policy::{CredentialSpec, EgressPolicy, PolicyError};

/// `[egress]` as written; strict like the rest of the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEgress {
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    #[serde(default)]
    credentials: Vec<Spanned<CredentialSpec>>,
}

/// The validated, canonical policy. `program_envs` are the `env` tables of the template's
/// harness and services: a placeholder variable may not be a key of any, or one would
/// silently hide the other.
pub(super) fn egress<'a>(
    src: &Source<'_>,
    raw: Option<&Spanned<RawEgress>>,
    program_envs: impl Iterator<Item = &'a BTreeMap<String, String>>,
) -> Result<EgressPolicy, TemplateError> {
    let Some(table) = raw else {
        return Ok(EgressPolicy::default());
    };
    let raw = table.get_ref();
    let policy = EgressPolicy {
        allow: raw.allow.iter().map(|p| p.get_ref().clone()).collect(),
        credentials: raw
            .credentials
            .iter()
            .map(|c| c.get_ref().clone())
            .collect(),
    }
    .validated()
    .map_err(|e| {
        let span = span_of(raw, &e).unwrap_or_else(|| table.span());
        src.error(Some(span), TemplateErrorKind::Egress(e))
    })?;
    for env in program_envs {
        let clash = policy
            .credentials
            .iter()
            .enumerate()
            .find(|(_, rule)| env.contains_key(&rule.placeholder_env));
        if let Some((index, rule)) = clash {
            return Err(src.error(
                Some(raw.credentials[index].span()),
                TemplateErrorKind::PlaceholderClash {
                    index,
                    name: rule.name.clone(),
                    var: rule.placeholder_env.clone(),
                },
            ));
        }
    }
    Ok(policy)
}

/// Where the entry the error names was written.
fn span_of(raw: &RawEgress, e: &PolicyError) -> Option<Range<usize>> {
    match e {
        PolicyError::Pattern { index, .. } => raw.allow.get(*index).map(Spanned::span),
        PolicyError::TooMany { list, max, .. } => match *list {
            "allow" => raw.allow.get(*max).map(Spanned::span),
            _ => raw.credentials.get(*max).map(Spanned::span),
        },
        PolicyError::Name { index, .. }
        | PolicyError::NoHosts { index, .. }
        | PolicyError::Host { index, .. }
        | PolicyError::NotAllowed { index, .. }
        | PolicyError::Header { index, .. }
        | PolicyError::Env { index, .. }
        | PolicyError::DuplicateEnv { index, .. }
        | PolicyError::ReservedEnv { index, .. }
        | PolicyError::Method { index, .. }
        | PolicyError::Path { index, .. }
        | PolicyError::TooManyScopes { index, .. }
        | PolicyError::TooManyHosts { index, .. } => raw.credentials.get(*index).map(Spanned::span),
    }
}
