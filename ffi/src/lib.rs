//! libfabric bindings: generated from the installed headers (issue 3). Empty until then.
