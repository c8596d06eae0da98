//! The one rule for names that must be DNS labels (boxes, tenants, templates, and so the
//! port host names made of them), with nothing else in the file so that anything may use it.

/// The DNS-label rule `name` breaks, if any (box, tenant and template names).
pub fn label_rule(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 63 {
        Some("a name has 1 to 63 characters")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        Some("a name uses only a-z, 0-9 and -")
    } else if name.starts_with('-') || name.ends_with('-') {
        Some("a name does not start or end with -")
    } else {
        None
    }
}
