//! Transport compression, the component's half: which codec to offer, and
//! whether a sync-in's data samples as worth compressing. The host does
//! the compressing natively; the sandbox runs the matching command.

use sandbox_sync_core::plan::{Planned, PlannedKind};
use sandbox_sync_core::plan_log::PlanLog;
use sandbox_sync_core::sample::{entropy_ratio, COMPRESSIBLE_BELOW};
use sandbox_sync_core::script::Codec;

use crate::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use crate::bindings::sandbox_sync::provider::sandbox_exec::{self, Compression};

/// Below this many bytes of file contents `auto` does not compress a
/// sync-in: starting the sandbox's decompressor costs more than it can
/// save on a small transfer.
pub const AUTO_MIN_BYTES: u64 = 1 << 20;

/// Under `auto`, a sync-out's gzip is chosen by the link's speed too: the
/// sandbox first sends this much of its archive as a probe, which the
/// host times and drops, and gzips only where its gzip is faster than the
/// link (see `offer_compression`). Half a MiB is ~10 ms at 50 MB/s, enough
/// to time a fast link, and costs a 5 MB/s one a tenth of a second. A
/// multiple of 64 KiB (the sandbox's sampler reads such blocks).
pub const LINK_PROBE: u64 = 512 << 10;
const _: () = assert!(LINK_PROBE.is_multiple_of(64 << 10));

/// Files sampled, spread over the transfer's bytes, and bytes read from each.
const SAMPLES: u64 = 8;
const SAMPLE_BYTES: u64 = 32 << 10;

/// The call's policy, from the host.
pub fn policy() -> Compression {
    sandbox_exec::transfer_compression()
}

/// Whether sync-in may keep files its targets already hold.
pub fn incremental() -> bool {
    sandbox_exec::transfer_incremental()
}

/// Whether incremental syncs judge every file by its content, as a racy
/// one (see [`sandbox_sync_core::incremental`]).
pub fn checksum() -> bool {
    sandbox_exec::transfer_checksum()
}

/// Codecs to offer, most wanted first (none: send plain). zstd first
/// unless gzip was asked for: it is faster at a better ratio, and cheap
/// on data that does not compress.
pub fn preference(policy: Compression) -> &'static [Codec] {
    match policy {
        Compression::None => &[],
        Compression::Gzip => &[Codec::Gzip, Codec::Zstd],
        Compression::Auto | Compression::Zstd => &[Codec::Zstd, Codec::Gzip],
    }
}

/// The first of `prefer` that the sandbox listed in `caps`.
pub fn choose(prefer: &[Codec], caps: &[Codec]) -> Option<Codec> {
    prefer.iter().copied().find(|c| caps.contains(c))
}

/// The WIT codec.
pub fn to_wit(codec: Codec) -> sandbox_exec::Codec {
    match codec {
        Codec::Gzip => sandbox_exec::Codec::Gzip,
        Codec::Zstd => sandbox_exec::Codec::Zstd,
    }
}

/// Whether a sync-in of `members` is worth compressing under `policy`.
pub fn worth_it(policy: Compression, members: &PlanLog, sources: &[&GrantedDir]) -> bool {
    match policy {
        Compression::None => false,
        Compression::Gzip | Compression::Zstd => true,
        Compression::Auto => sampled_compressible(members, sources),
    }
}

/// A host file's grant, path and size; `None` for other members and
/// empty files.
fn host_file(p: Planned) -> Option<(usize, Box<str>, u64)> {
    match p.kind {
        PlannedKind::HostFile { grant, path, stamp } if stamp.size > 0 => {
            Some((grant, path, stamp.size))
        }
        _ => None,
    }
}

/// Samples up to [`SAMPLES`] host files at evenly spaced points of the
/// transfer's bytes, so big files weigh as much as they cost on the wire.
/// Two passes over the plan: one for the total, one to pick the files.
fn sampled_compressible(members: &PlanLog, sources: &[&GrantedDir]) -> bool {
    let total: u64 = members.iter().filter_map(host_file).map(|f| f.2).sum();
    if total < AUTO_MIN_BYTES {
        return false;
    }
    let mut ratios = Vec::new();
    let mut files = members.iter().filter_map(host_file);
    let mut current = files.next();
    let mut before = 0u64;
    for k in 0..SAMPLES {
        let at = total / SAMPLES * k + total / (2 * SAMPLES);
        let mut moved = k == 0;
        while let Some(f) = current.as_ref().filter(|f| before + f.2 <= at) {
            before += f.2;
            current = files.next();
            moved = true;
        }
        let Some((grant, path, _)) = &current else {
            break;
        };
        // A big file spans several sample points: sample it once.
        if !moved {
            continue;
        }
        if let Some(r) = sources.get(*grant).and_then(|g| sample(g, path)) {
            ratios.push(r);
        }
    }
    !ratios.is_empty() && ratios.iter().sum::<f64>() / (ratios.len() as f64) < COMPRESSIBLE_BELOW
}

/// The entropy ratio of the first bytes of `path`; none if unreadable
/// (the transfer itself will report why).
fn sample(grant: &GrantedDir, path: &str) -> Option<f64> {
    let stream = grant.open_read(path).ok()?;
    let mut buf = Vec::new();
    while (buf.len() as u64) < SAMPLE_BYTES {
        match stream.blocking_read(SAMPLE_BYTES - buf.len() as u64) {
            Ok(chunk) if !chunk.is_empty() => buf.extend_from_slice(&chunk),
            _ => break,
        }
    }
    Some(entropy_ratio(&buf))
}
