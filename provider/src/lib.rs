//! The libfabric provider (issue 3): libfabric objects on top of smr-core. Empty until then.
