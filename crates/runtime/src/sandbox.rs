//! The `sandbox` backend: OCI bundles run by runc, crun or runsc. (Being written.)
