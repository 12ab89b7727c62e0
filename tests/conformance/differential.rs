//! The contract's "native and fallback paths are interchangeable", checked:
//! random trees synced by the tar-stream component and by the base64
//! fallback must land identically (content, modes, link targets, empty
//! directories, excludes).

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::sync::OnceLock;

use sandbox_sync_tests::*;

const NAMES: &[&str] = &[
    "a",
    "d",
    "b c",
    "it's",
    "\"q\"",
    "ünï",
    "$(x)",
    "-dash",
    " lead",
    "trail ",
    "x.log",
    "node_modules",
    "._apple",
    "日本",
    "a*b",
    "[ab]",
    "back\\slash",
    "Icon\r",
    "t\tab",
    "new\nline",
    "esc\u{1b}[0m",
];
const MODES: &[u32] = &[0o600, 0o644, 0o640, 0o700, 0o755, 0o444];

fn random_tree(rng: &mut Rng, dir: &Path, depth: u32) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..rng.below(6) + 1 {
        let name = format!("{}{}", rng.pick(NAMES), i);
        let p = dir.join(&name);
        match rng.below(10) {
            0..=5 => {
                let len = [0, 1, 511, 512, 513, 4096, 70_000][rng.below(7)];
                let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                std::fs::write(&p, data).unwrap();
                std::fs::set_permissions(
                    &p,
                    std::fs::Permissions::from_mode(MODES[rng.below(MODES.len())]),
                )
                .unwrap();
            }
            6 | 7 if depth < 3 => {
                random_tree(rng, &p, depth + 1);
                std::fs::set_permissions(
                    &p,
                    std::fs::Permissions::from_mode([0o755, 0o700, 0o750][rng.below(3)]),
                )
                .unwrap();
            }
            8 => std::fs::create_dir_all(&p).unwrap(),
            _ => symlink(
                ["../x", "a0", "/etc/hostname", "sub/../a0", "missing"][rng.below(5)],
                &p,
            )
            .unwrap(),
        }
    }
}

fn fallback() -> &'static Runtime {
    static R: OnceLock<Runtime> = OnceLock::new();
    R.get_or_init(|| {
        block_on(Runtime::from_file(Path::new(
            sandbox_sync_host::runtime::FALLBACK_COMPONENT_PATH,
        )))
        .unwrap()
    })
}

fn tar_stream() -> &'static Runtime {
    static R: OnceLock<Runtime> = OnceLock::new();
    R.get_or_init(|| block_on(Runtime::embedded()).unwrap())
}

/// Where the fallback runs beside the tar stream in `u`: the same, but on
/// a toolbox sandbox (it has no streaming exec to drive) a local one with
/// the same userland.
fn fallback_env(u: Env) -> Env {
    match u.transport {
        Transport::Daytona => Env {
            transport: Transport::Local,
            ..u
        },
        _ => u,
    }
}

fn both_land_identically(u: Env) {
    let cases: u64 = std::env::var("DIFF_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let mut compared = 0;
    let mut nodes = 0;
    for seed in 1..=cases {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let host = tempfile::tempdir().unwrap();
        let src = host.path().join("src");
        random_tree(&mut rng, &src, 0);
        let exclude = match rng.below(3) {
            0 => None,
            1 => Some(vec!["*.log".to_string()]),
            _ => Some(vec!["node_modules".to_string(), "b c*".to_string()]),
        };
        let follow = rng.below(4) == 0;
        let mut trees = Vec::new();
        let mut execs = Vec::new();
        for (rt, env) in [(tar_stream(), u), (fallback(), fallback_env(u))] {
            let sb = Sandbox::new(env);
            let mut m = dir(&src, sb.remote("proj"));
            m.exclude = exclude.clone();
            m.follow_symlinks = Some(follow);
            let result = block_on(rt.sync_in(&[op("o", vec![m])], &sb.options(), sb.backend()));
            match result {
                Ok(out) => {
                    execs.push(out.execs);
                    trees.push(Ok((
                        snapshot(&sb.remote_on_host("proj")),
                        out.operations[0].files_transferred,
                    )));
                }
                Err(f) => trees.push(Err(f.error.kind)),
            }
        }
        assert_eq!(
            trees[0], trees[1],
            "seed {seed}: the two providers disagree (follow={follow}, exclude={exclude:?})"
        );
        if let Ok((tree, _)) = &trees[0] {
            compared += 1;
            nodes += tree.len();
        }
        if let [native, fb] = execs[..] {
            assert_eq!(native, 1, "seed {seed}");
            assert!(
                fb >= 3,
                "seed {seed}: the fallback stages, appends and extracts ({fb} execs)"
            );
        }
    }
    // Refusals (e.g. following a link out of the source) must agree too, but
    // most cases have to be real transfers for the comparison to mean anything.
    assert!(
        compared * 3 >= cases * 2,
        "only {compared} of {cases} cases transferred"
    );
    assert!(
        nodes as u64 >= compared * 3,
        "only {nodes} entries compared over {compared} cases"
    );
}

sandbox_sync_tests::for_each_userland!(both_land_identically);
