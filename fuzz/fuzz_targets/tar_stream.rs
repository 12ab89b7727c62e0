//! The strict tar parser and the tree policy, natively (coverage-guided):
//! no panic on any input, and every accepted entry satisfies the policy.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbox_sync_core::sandbox_path::is_clean_relative;
use sandbox_sync_core::tar_read::{EntryKind, Limits, Parser, Source, MAX_COMPONENT, MAX_NAME};
use sandbox_sync_core::tree::TreePolicy;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_entries: 10_000,
        max_metadata_bytes: 1 << 20,
        max_payload_bytes: 1 << 24,
    };
    let mut parser = Parser::new(limits);
    let mut tree = TreePolicy::new(limits.max_entries);
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
                        assert!(!t.starts_with('/') && !t.is_empty() && !t.contains('\0'));
                    }
                    EntryKind::HardLink(t) => {
                        assert_eq!(e.size, 0);
                        assert!(is_clean_relative(t));
                    }
                }
                if tree.admit(&e).is_err() {
                    return;
                }
                // An admitted link never climbs after a name, nor past the root.
                if let EntryKind::Symlink(t) = &e.kind {
                    let depth = e.path.matches('/').count();
                    let comps: Vec<&str> = t
                        .split('/')
                        .filter(|c| !c.is_empty() && *c != ".")
                        .collect();
                    let ups = comps.iter().take_while(|c| **c == "..").count();
                    assert!(ups <= depth, "link {} -> {t} climbs out", e.path);
                    assert!(!comps[ups..].contains(&".."), "link {} -> {t}", e.path);
                }
                let mut skip = vec![0u8; e.data_len().min(1 << 24) as usize];
                if src.read_exact(&mut skip).is_err() {
                    return;
                }
            }
            Ok(None) => return,
            Err(_) => return,
        }
    }
});
