//! A box's labels (`labels` at create and in `PATCH /v1/boxes/{ref}`) and the list filter
//! that selects boxes by them (`GET /v1/boxes?label=k=v&state=running`).
//!
//! A label is the tenant's own bookkeeping: berth never reads one. Keys are short names
//! (so `k=v` in a filter is never ambiguous: a key has no `=`); values are any short text
//! without control characters.

use std::collections::BTreeMap;

use berth_store::{BoxRecord, BoxState};

use crate::error::OpError;

/// At most this many labels per box.
pub const MAX_LABELS: usize = 64;
/// A key's longest.
pub const MAX_KEY_BYTES: usize = 63;
/// A value's longest.
pub const MAX_VALUE_BYTES: usize = 255;

/// Checks a box's labels: keys of 1 to 63 `A-Z a-z 0-9 . _ - /` starting with a letter or
/// digit, values of at most 255 bytes without control characters, at most 64 labels.
pub fn validate(labels: &BTreeMap<String, String>) -> Result<(), OpError> {
    if labels.len() > MAX_LABELS {
        return Err(OpError::TooMany {
            what: "labels",
            count: labels.len(),
            max: MAX_LABELS,
        });
    }
    for (key, value) in labels {
        if let Some(rule) = key_rule(key).or_else(|| value_rule(value)) {
            return Err(OpError::InvalidLabel {
                key: key.escape_debug().to_string(),
                rule,
            });
        }
    }
    Ok(())
}

fn key_rule(key: &str) -> Option<&'static str> {
    let first_ok = key
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric());
    let rest_ok = key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b));
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        Some("a key has 1 to 63 characters")
    } else if !first_ok || !rest_ok {
        Some("a key uses A-Z, a-z, 0-9, '.', '_', '-' and '/', and starts with a letter or digit")
    } else {
        None
    }
}

fn value_rule(value: &str) -> Option<&'static str> {
    if value.len() > MAX_VALUE_BYTES {
        Some("a value is at most 255 bytes")
    } else if value.chars().any(char::is_control) {
        Some("a value has no control characters")
    } else {
        None
    }
}

/// Which boxes a list returns: every label given (all must match) and the state, if given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BoxFilter {
    pub labels: BTreeMap<String, String>,
    pub state: Option<BoxState>,
}

impl BoxFilter {
    /// From a list's query pairs: `label=k=v` (repeatable) and `state=<state>`. Anything
    /// else, a label that is not `k=v`, the same key twice or an unknown state is refused.
    pub fn from_query(pairs: Vec<(String, String)>) -> Result<BoxFilter, OpError> {
        let mut filter = BoxFilter::default();
        for (name, value) in pairs {
            let invalid = |rule| OpError::InvalidFilter {
                filter: format!("{name}={value}").escape_debug().to_string(),
                rule,
            };
            match name.as_str() {
                "label" => {
                    let Some((key, wanted)) = value.split_once('=') else {
                        return Err(invalid("a label filter is label=KEY=VALUE"));
                    };
                    if key_rule(key).is_some() {
                        return Err(invalid("the key is not a label key"));
                    }
                    if filter.labels.insert(key.into(), wanted.into()).is_some() {
                        return Err(invalid("a key is given twice"));
                    }
                }
                "state" => {
                    let state = value
                        .parse::<BoxState>()
                        .ok()
                        .filter(|s| *s != BoxState::Deleted)
                        .ok_or_else(|| {
                            invalid("state is one of stopped, starting, running, stopping, paused, failed")
                        })?;
                    if filter.state.replace(state).is_some() {
                        return Err(invalid("state is given twice"));
                    }
                }
                _ => return Err(invalid("the filters are label=KEY=VALUE and state=STATE")),
            }
        }
        Ok(filter)
    }

    pub fn matches(&self, record: &BoxRecord) -> bool {
        self.state.is_none_or(|s| s == record.state)
            && self
                .labels
                .iter()
                .all(|(k, v)| record.labels.get(k) == Some(v))
    }
}

/// The prefix of a box label that places the box: `node/<key>=<value>` puts it only on a
/// node labelled `<key>=<value>` (`berth node --label`).
pub const NODE_LABEL_PREFIX: &str = "node/";

/// The node labels a box asks for: its template's `node_labels`, and its own `node/KEY`
/// labels over them.
pub fn node_selector(
    template: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let own = labels.iter().filter_map(|(key, value)| {
        let key = key.strip_prefix(NODE_LABEL_PREFIX)?;
        (!key.is_empty()).then(|| (key.to_owned(), value.clone()))
    });
    let mut selector = template.clone();
    selector.extend(own);
    selector
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_box_asks_for_its_templates_node_labels_and_its_own_over_them() {
        let template = BTreeMap::from([
            ("gpu".to_owned(), "yes".to_owned()),
            ("zone".to_owned(), "a".to_owned()),
        ]);
        let labels = BTreeMap::from([
            ("node/zone".to_owned(), "b".to_owned()),
            ("team".to_owned(), "x".to_owned()),
            ("node/".to_owned(), "ignored".to_owned()),
        ]);
        let selector = node_selector(&template, &labels);
        assert_eq!(
            selector,
            BTreeMap::from([
                ("gpu".to_owned(), "yes".to_owned()),
                ("zone".to_owned(), "b".to_owned())
            ])
        );
        assert!(node_selector(&BTreeMap::new(), &BTreeMap::new()).is_empty());
    }
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn keys_values_and_counts_are_checked() {
        assert!(validate(&labels(&[("team", "red"), ("example.com/owner", "a b=c")])).is_ok());
        for (key, value) in [
            ("", "v"),
            ("-team", "v"),
            ("a=b", "v"),
            ("a b", "v"),
            ("é", "v"),
            ("team", "a\nb"),
            ("team", "a\0b"),
        ] {
            let err = validate(&labels(&[(key, value)])).unwrap_err();
            assert!(
                matches!(err, OpError::InvalidLabel { .. }),
                "{key:?}: {err}"
            );
        }
        assert!(validate(&labels(&[(&"k".repeat(64), "v")])).is_err());
        assert!(validate(&labels(&[("k", &"v".repeat(256))])).is_err());
        let many: BTreeMap<String, String> =
            (0..65).map(|i| (format!("k{i}"), String::new())).collect();
        let err = validate(&many).unwrap_err();
        assert_eq!(err.to_string(), "a box has at most 64 labels, got 65");
    }

    #[test]
    fn filters_parse_and_bad_ones_say_why() {
        let f = BoxFilter::from_query(query(&[
            ("label", "team=red"),
            ("label", "note=a=b"),
            ("state", "running"),
        ]))
        .unwrap();
        assert_eq!(f.labels, labels(&[("team", "red"), ("note", "a=b")]));
        assert_eq!(f.state, Some(BoxState::Running));
        for bad in [
            &[("label", "team")][..],
            &[("label", "=red")],
            &[("label", "a=1"), ("label", "a=2")],
            &[("state", "deleted")],
            &[("state", "asleep")],
            &[("state", "running"), ("state", "stopped")],
            &[("name", "x")],
        ] {
            let err = BoxFilter::from_query(query(bad)).unwrap_err();
            assert!(
                matches!(err, OpError::InvalidFilter { .. }),
                "{bad:?}: {err}"
            );
        }
    }
}
