//! In-box ports (protocol version 3): `GET /v1/ports/{port}` upgraded to a raw byte stream
//! that `berth-init` connects to `127.0.0.1:<port>` inside the box.
