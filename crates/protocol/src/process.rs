//! Processes that outlive their request, and what keeps a box awake (protocol version 3).
