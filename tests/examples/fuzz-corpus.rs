//! Writes the hostile fixtures as seed corpora for the fuzz targets:
//! `cargo run -p sandbox-sync-tests --example fuzz-corpus -- fuzz/corpus`.

use sandbox_sync_tests::hostile::{self, mark};

/// Fixtures that seed the deadline target.
const DEADLINE_SEEDS: &[&str] = &[
    "benign",
    "dotdot",
    "chained-links-l2-l1",
    "hardlink-dotdot",
    "duplicates-10000",
    "truncated-mid-content",
    "reserved-scratch-name",
];

fn main() -> anyhow::Result<()> {
    let out = std::path::PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    for target in [
        "tar_stream",
        "component_sync_out",
        "sync_out_deadline",
        "script_quote",
    ] {
        std::fs::create_dir_all(out.join(target))?;
    }
    let mut fixtures = hostile::corpus();
    fixtures.push((
        "benign",
        hostile::end(
            [
                hostile::dir(b"d", 0o755),
                hostile::file(b"d/ok", b"fine"),
                hostile::symlink(b"l", b"d/ok"),
            ]
            .concat(),
        ),
    ));
    for (name, bytes) in fixtures {
        // The oversized floods make slow seeds; the fuzzer finds limits anyway.
        if bytes.len() > 1 << 20 {
            continue;
        }
        std::fs::write(out.join("tar_stream").join(name), &bytes)?;
        // The component target prefixes the first frame marker itself.
        let mut framed = bytes.clone();
        framed.extend(mark("op 0"));
        framed.extend(mark("end"));
        // Flag 0: a fresh target; flag 1: a filled one, incremental, whose
        // listing (length first) names its `a` and `d/b` as they are.
        let mut fresh = vec![0u8];
        fresh.extend(&framed);
        std::fs::write(out.join("component_sync_out").join(name), &fresh)?;
        let listing = b"6 1600000000 1600000000 644 ./a\n6 1600000000 1600000000 644 ./d/b\n";
        let mut kept = vec![1u8];
        kept.extend((listing.len() as u16).to_be_bytes());
        kept.extend(listing);
        kept.extend(&framed);
        std::fs::write(
            out.join("component_sync_out")
                .join(format!("{name}-incremental")),
            &kept,
        )?;
        // The deadline target (each run lasts up to its timeout): a few
        // shapes, with no stall, a pause and a hang mid-stream.
        if !DEADLINE_SEEDS.contains(&name) {
            continue;
        }
        for (stall, tag) in [(0u8, "run"), (1, "pause"), (2, "hang")] {
            let at = (framed.len() / 2).min(0xffff) as u16;
            let mut seed = vec![stall];
            seed.extend(at.to_be_bytes());
            seed.extend(&framed);
            std::fs::write(
                out.join("sync_out_deadline").join(format!("{name}-{tag}")),
                seed,
            )?;
        }
    }
    for (i, s) in [
        "a b", "it's", "$(id)", "`id`", "-rf", "{a,b}", "a\nb", "a\u{a0}b", " lead", "\\", "\"",
        "'\"'\"'",
    ]
    .iter()
    .enumerate()
    {
        std::fs::write(out.join("script_quote").join(format!("q{i}")), s)?;
    }
    Ok(())
}
