//! Pure policy core of sandbox-sync.
//!
//! Everything here is plain Rust with no I/O: it builds decisions and bytes
//! that the provider component (`guest/component`) sends through the host's
//! `sandbox-exec` and `host-fs` imports. Because it has no I/O it unit-tests
//! natively and can be fuzzed without a sandbox.
//!
//! - [`byte_name`]: names that are not UTF-8, carried in WIT strings.
//! - [`sandbox_path`]: lexical confinement of sandbox paths under the remote dir.
//! - [`quote`]: POSIX single-quoting for script text.
//! - [`sample`]: whether sampled data is worth compressing.
//! - [`exclude`]: `tar --exclude` glob semantics.
//! - [`incremental`]: when a re-sync may leave a target file as it is.
//! - [`mode`]: the permission bits a mapping may request.
//! - [`plan`]: what a sync-in sends, walked over a [`plan::HostDir`].
//! - [`plan_log`]: a plan held compactly (a few dozen bytes a member).
//! - [`outcome`]: what a finished sandbox program's exit and status lines mean.
//! - [`tar_write`]: tar headers for the inbound archive (contents are spliced host-side).
//! - [`tar_read`]: a strict, bounded parser for sandbox-written tar streams.
//! - [`tree`]: whole-archive policy (duplicates, links, writes through links).
//! - [`script`]: the in-sandbox POSIX `sh` programs and their framing.
//! - [`token`]: unpredictable scratch names and commit tokens.
#![deny(missing_docs)]

pub mod byte_name;
pub mod error;
pub mod exclude;
pub mod incremental;
pub mod mode;
pub mod outcome;
pub mod plan;
pub mod plan_log;
pub mod quote;
pub mod sample;
pub mod sandbox_path;
pub mod script;
pub mod tar_read;
pub mod tar_write;
pub mod token;
pub mod tree;

pub use error::{CommandFailure, Error, ErrorKind};

/// Version of the WIT package (`wit/provider.wit`) this code speaks.
pub const WIT_VERSION: &str = "0.2.10";

/// Incremental syncs: the smallest file mapping whose target a re-sync may
/// keep. Below it, sending the file costs less than the `stat` that could
/// spare it.
pub const KEEP_FILE_MIN: u64 = 16 << 10;

/// Prefix of every scratch name; the orchestrator's wipe step preserves it.
pub const SCRATCH_PREFIX: &str = ".paperclip-upload";

/// Where the sandbox kept its record of what incremental sync-in landed
/// (see [`incremental`]) before issue 46: at the top of the remote dir,
/// in the agent's view. A program removes it wherever it finds it; the
/// record now lives outside the remote dir ([`state_key`]).
pub const LEGACY_STATE_FILE: &str = ".paperclip-upload-state";

/// The name of remote dir `root`'s incremental record in the sandbox
/// user's state directory (see `common.sh`, `_ss_findstate`): one record
/// per remote dir as the request spells it.
pub fn state_key(root: &str) -> String {
    use std::hash::Hasher as _;
    let mut h = siphasher::sip::SipHasher13::new();
    h.write(root.as_bytes());
    format!("ws-{:016x}", h.finish())
}
