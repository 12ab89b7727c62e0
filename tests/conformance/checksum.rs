//! `--checksum` (issue 47): incremental syncs judge every file by its
//! content, as they judge a racy one, both ways. Exact even against a
//! writer that changes a file without moving its ctime at all: a shared
//! mapping held on tmpfs, which never writes a page back.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbox_sync_tests::*;

fn opts(sb: &Sandbox, checksum: bool) -> SyncOptions {
    let mut o = sb.options();
    o.incremental = true;
    o.checksum = checksum;
    o
}

fn sync_in(sb: &Sandbox, target: &str, checksum: bool) -> SyncOutcome {
    let src = sb.host.join("src");
    sb.sync_in_with(
        &[op("in", vec![dir(&src, sb.remote(target))])],
        &opts(sb, checksum),
    )
    .expect("sync-in")
}

fn sync_out(sb: &Sandbox, target: &Path, checksum: bool) -> SyncOutcome {
    let m = dir_out(sb.remote("proj"), target);
    sb.sync_out_with(&[op("out", vec![m])], &opts(sb, checksum))
        .expect("sync-out")
}

/// A host source and a sandbox source with a few files each, and the
/// file of each a writer maps: (host file, sandbox file).
fn seed(sb: &Sandbox) -> (PathBuf, PathBuf) {
    for i in 0..5 {
        sb.write_host(&format!("src/f{i}.txt"), format!("file {i}\n").as_bytes());
        sb.write_remote(&format!("proj/f{i}.txt"), format!("file {i}\n").as_bytes());
    }
    let host = sb.write_host("src/db.bin", &vec![b'a'; 8192]);
    let sandbox = sb.write_remote("proj/db.bin", &vec![b'a'; 8192]);
    (host, sandbox)
}

/// Checksum re-syncs, both ways, land what a full sync lands, writes
/// through a mapping included, and keep what did not change.
fn checksum_resyncs_land_what_a_full_sync_lands(u: Env) {
    let sb = Sandbox::new(u);
    let (host, sandbox) = seed(&sb);
    let back = sb.host.join("back");
    let (mut hw, mut sw) = (MappedWriter::open(&host), MappedWriter::open(&sandbox));
    sync_in(&sb, "ws", true);
    sync_out(&sb, &back, true);
    sync_out(&sb, &back, true);
    for (i, word) in [b"ONE!", b"TWO!"].into_iter().enumerate() {
        hw.write(4 * i as u64, word);
        sw.write(4 * i as u64, word);
        settle();
        let sent_in = sync_in(&sb, "ws", true);
        let sent_out = sync_out(&sb, &back, true);
        assert_same_tree(&sb.host.join("src"), &sb.remote_on_host("ws"));
        assert_same_tree(&sb.remote_on_host("proj"), &back);
        if keeps_unchanged(u) {
            assert_eq!(sent_in.operations[0].files_transferred, 1, "{sent_in:?}");
            assert_eq!(sent_out.operations[0].files_transferred, 1, "{sent_out:?}");
        }
    }
    if keeps_unchanged(u) {
        assert_eq!(sync_in(&sb, "ws", true).operations[0].files_transferred, 0);
        assert_eq!(
            sync_out(&sb, &back, true).operations[0].files_transferred,
            0
        );
    }
}

for_each_userland!(checksum_resyncs_land_what_a_full_sync_lands);

/// The residual `--checksum` is for: a writer that keeps a file mapped on
/// tmpfs, where no page is ever written back, writes unseen once the file
/// has settled (its last stamp a minute behind the sync that recorded
/// it). Both ways, a checksum target lands every write; where the trees
/// live on tmpfs, a default target keeps the stale bytes, as
/// THREAT_MODEL.md says. Waits out `RACY_NS` once, so one environment.
#[test]
fn checksum_sees_what_no_ctime_shows() {
    if !keeps_unchanged(GNU_LOCAL) {
        return;
    }
    let sb = Sandbox::new(GNU_LOCAL);
    let (host, sandbox) = seed(&sb);
    let (mut hw, mut sw) = (MappedWriter::open(&host), MappedWriter::open(&sandbox));
    hw.write(0, b"ONE!");
    sw.write(0, b"ONE!");
    // Past the racy window: the files' identities alone now count.
    std::thread::sleep(Duration::from_nanos(
        u64::try_from(sandbox_sync_core::incremental::RACY_NS).unwrap(),
    ));
    std::thread::sleep(Duration::from_secs(3));
    let (plain, summed) = (sb.host.join("plain"), sb.host.join("summed"));
    for _ in 0..2 {
        sync_in(&sb, "plain", false);
        sync_in(&sb, "summed", true);
        sync_out(&sb, &plain, false);
        sync_out(&sb, &summed, true);
    }
    // The page the writer dirtied a minute ago, again: no stamp.
    let before = std::fs::metadata(&host).unwrap();
    hw.write(4, b"TWO!");
    sw.write(4, b"TWO!");
    assert_eq!(
        std::fs::metadata(&host).unwrap().modified().unwrap(),
        before.modified().unwrap()
    );
    sync_in(&sb, "plain", false);
    sync_in(&sb, "summed", true);
    sync_out(&sb, &plain, false);
    sync_out(&sb, &summed, true);
    let head = |p: PathBuf| std::fs::read(p).unwrap()[..8].to_vec();
    assert_eq!(head(sb.remote_on_host("summed/db.bin")), b"ONE!TWO!");
    assert_eq!(head(summed.join("db.bin")), b"ONE!TWO!");
    if on_tmpfs(&sb.host) {
        assert_eq!(head(sb.remote_on_host("plain/db.bin")), b"ONE!aaaa");
        assert_eq!(head(plain.join("db.bin")), b"ONE!aaaa");
    }
}

/// Whether `p` is on tmpfs, which never writes a page back.
fn on_tmpfs(p: &Path) -> bool {
    rustix::fs::statfs(p).is_ok_and(|s| s.f_type == 0x0102_1994)
}
