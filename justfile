# sandbox-sync recipes. `just --list` shows them.

set shell := ["bash", "-euo", "pipefail", "-c"]

# List recipes.
default:
    @just --list

# Run the demo: a local sandbox (BusyBox chroot when available), a sample workspace in, results out.
demo:
    cargo run -q -p sandbox-sync-host -- demo

# Everything CI checks: formatting, lints, unit, conformance (against both
# provider components), differential, CLI and worker tests.
test: lint
    cargo test --locked
    SANDBOX_SYNC_PROVIDER=fallback cargo test --locked -p sandbox-sync-tests --test conformance

# Formatting and clippy (host crates and, via the build script, the guest).
lint:
    cargo fmt --all --check
    cargo clippy --locked --all-targets -- -D warnings

# Build the release binary (embeds the component).
build:
    cargo build --release --locked -p sandbox-sync-host

# Both provider components on their own, for `--component`.
components:
    cargo build --locked -p sandbox-sync-component -p sandbox-sync-base64-fallback --target wasm32-wasip2 --profile guest
    @ls target/wasm32-wasip2/guest/*.wasm

# Round-trip through a real cluster (needs kubectl and a kubeconfig; not run in CI).
e2e-cluster:
    tests/e2e-cluster.sh
