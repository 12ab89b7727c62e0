# sandbox-sync recipes. `just --list` shows them.

set shell := ["bash", "-euo", "pipefail", "-c"]

# List recipes.
default:
    @just --list

# Run the demo: a local sandbox (BusyBox chroot when available), a sample workspace in, results out.
demo:
    cargo run -q -p sandbox-sync-host -- demo

# Everything CI checks: formatting, lints, unit, conformance and CLI tests.
test: lint
    cargo test --locked

# Formatting and clippy (host crates and, via the build script, the guest).
lint:
    cargo fmt --all --check
    cargo clippy --locked --all-targets -- -D warnings

# Build the release binary (embeds the component).
build:
    cargo build --release --locked -p sandbox-sync-host

# The provider component on its own, for `--component`.
component:
    cargo build --locked -p sandbox-sync-component --target wasm32-wasip2 --profile guest
    @echo target/wasm32-wasip2/guest/sandbox_sync_component.wasm
