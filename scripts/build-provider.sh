#!/usr/bin/env bash
# Build librshm-fi.so (profile `provider`: release with LTO, see Cargo.toml) into target/rshm/,
# the directory to give FI_PROVIDER_PATH.
# (cargo names the library librshm_provider.so; libfabric loads files ending in "fi.so".)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --profile provider --locked -p rshm-provider
mkdir -p target/rshm
install -m 0755 target/provider/librshm_provider.so target/rshm/librshm-fi.so
echo "built $PWD/target/rshm/librshm-fi.so (use FI_PROVIDER_PATH=$PWD/target/rshm)"
