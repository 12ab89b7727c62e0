//! The strict tar parser and the tree policy, natively (coverage-guided):
//! no panic on any input, and every accepted entry satisfies the policy,
//! under both link policies (the input's first bit picks one).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbox_sync_core::sandbox_path::is_clean_relative;
use sandbox_sync_core::tar_read::{EntryKind, Limits, Parser, Source, MAX_COMPONENT, MAX_NAME};
use sandbox_sync_core::tree::{Escaping, TreePolicy};

/// Whether `target`, resolved lexically from a directory `depth` below the
/// top, stays inside at every step.
fn stays_inside(depth: usize, target: &str) -> bool {
    if target.starts_with('/') {
        return false;
    }
    let mut at = depth as isize;
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => at -= 1,
            _ => at += 1,
        }
        if at < 0 {
            return false;
        }
    }
    true
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_entries: 10_000,
        max_metadata_bytes: 1 << 20,
        max_payload_bytes: 1 << 24,
    };
    let mut parser = Parser::new(limits);
    let escaping = if data.first().is_some_and(|b| b & 1 == 1) {
        Escaping::Skip
    } else {
        Escaping::Refuse
    };
    let mut tree = TreePolicy::new(limits.max_entries).escaping(escaping);
    let mut src = data;
    loop {
        match parser.next_entry(&mut src) {
            Ok(Some(e)) => {
                assert!(
                    is_clean_relative(&e.path),
                    "accepted unclean path {:?}",
                    e.path
                );
                assert!(
                    e.path.len() <= MAX_NAME && e.path.split('/').all(|c| c.len() <= MAX_COMPONENT)
                );
                // Any name the filesystem allows travels (control
                // characters too); NUL never.
                assert!(!e.path.contains('\0'), "NUL in {:?}", e.path);
                assert!(e.mode <= 0o777, "special mode bits {:o}", e.mode);
                match &e.kind {
                    EntryKind::File => {}
                    EntryKind::Dir => assert_eq!(e.size, 0),
                    EntryKind::Symlink(t) => {
                        assert_eq!(e.size, 0);
                        // Absolute ones too: the tree judges where it leads.
                        assert!(!t.is_empty() && !t.contains('\0'));
                    }
                    EntryKind::HardLink(t) => {
                        assert_eq!(e.size, 0);
                        assert!(is_clean_relative(t));
                    }
                }
                if tree.admit(&e).is_err() {
                    return;
                }
                // An admitted link that leaves is one the tree skips, and
                // only under Skip.
                if let EntryKind::Symlink(t) = &e.kind {
                    if !stays_inside(e.path.matches('/').count(), t) {
                        assert_eq!(escaping, Escaping::Skip, "link {} -> {t} admitted", e.path);
                        assert!(
                            tree.skipped().any(|(p, _)| p == e.path),
                            "link {} -> {t} not skipped",
                            e.path
                        );
                    }
                }
                let mut skip = vec![0u8; e.data_len().min(1 << 24) as usize];
                if src.read_exact(&mut skip).is_err() {
                    return;
                }
            }
            Ok(None) => {
                // Whatever `finish` says, no link it lets land climbs out
                // of another (it is refused) nor leaves (skipped before).
                let _ = tree.finish();
                return;
            }
            Err(_) => return,
        }
    }
});
