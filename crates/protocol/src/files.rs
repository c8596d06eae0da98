//! Whole directories as tar streams, and file watching (protocol version 3).
