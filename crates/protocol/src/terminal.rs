//! Terminals (protocol version 3): a command on a new PTY in the box.
