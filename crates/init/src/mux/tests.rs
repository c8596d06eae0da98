//! Two links joined by an in-memory pipe (or a Unix socket pair), one per role.

use super::*;
