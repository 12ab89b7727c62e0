//! Hostile tar streams, as a compromised sandbox's `tar` would write them:
//! one fixture per attack class of `security-anchors.md` §1-4.
//!
//! Every fixture is a whole archive for one directory mapping. The
//! component must refuse each with `unsafe-archive` (or `limit-exceeded`)
//! and land nothing.

/// A raw 512-byte header with a valid checksum (unless corrupted later).
pub fn header(name: &[u8], ty: u8, size: u64, mode: u32, link: &[u8]) -> Vec<u8> {
    let mut h = tar::Header::new_gnu();
    h.set_size(size);
    h.set_mode(mode);
    h.set_mtime(1_700_000_000);
    h.as_old_mut().linkflag[0] = ty;
    let n = name.len().min(100);
    h.as_old_mut().name[..n].copy_from_slice(&name[..n]);
    let l = link.len().min(100);
    h.as_old_mut().linkname[..l].copy_from_slice(&link[..l]);
    h.set_cksum();
    h.as_bytes().to_vec()
}

fn pad(v: &mut Vec<u8>) {
    let rem = v.len() % 512;
    if rem != 0 {
        v.resize(v.len() + 512 - rem, 0);
    }
}

/// A regular file member with contents.
pub fn file(name: &[u8], data: &[u8]) -> Vec<u8> {
    file_mode(name, data, 0o644)
}

/// A regular file member with a mode.
pub fn file_mode(name: &[u8], data: &[u8], mode: u32) -> Vec<u8> {
    let mut v = header(name, b'0', data.len() as u64, mode, b"");
    v.extend_from_slice(data);
    pad(&mut v);
    v
}

/// A directory member.
pub fn dir(name: &[u8], mode: u32) -> Vec<u8> {
    let mut n = name.to_vec();
    n.push(b'/');
    header(&n, b'5', 0, mode, b"")
}

/// A symlink member.
pub fn symlink(name: &[u8], target: &[u8]) -> Vec<u8> {
    header(name, b'2', 0, 0o777, target)
}

/// A hard link member.
pub fn hardlink(name: &[u8], target: &[u8]) -> Vec<u8> {
    header(name, b'1', 0, 0o644, target)
}

/// A GNU long-name (`L`) or long-link (`K`) record.
pub fn gnu_long(ty: u8, value: &[u8]) -> Vec<u8> {
    let mut data = value.to_vec();
    data.push(0);
    let mut v = header(b"././@LongLink", ty, data.len() as u64, 0o644, b"");
    v.extend_from_slice(&data);
    pad(&mut v);
    v
}

/// A PAX extended header (`x`) with these records.
pub fn pax(records: &[(&str, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (k, val) in records {
        let core_len = 1 + k.len() + 1 + val.len() + 1;
        let mut len = core_len + 1;
        while format!("{len}").len() + core_len != len {
            len += 1;
        }
        body.extend_from_slice(format!("{len} {k}=").as_bytes());
        body.extend_from_slice(val);
        body.push(b'\n');
    }
    let mut v = header(b"PaxHeaders/x", b'x', body.len() as u64, 0o644, b"");
    v.extend_from_slice(&body);
    pad(&mut v);
    v
}

/// A 512-byte frame marker of the outbound program (`map 0 0`, `op 0`, `end`).
pub fn mark(words: &str) -> Vec<u8> {
    format!("{:<511}\n", format!("SANDBOX-SYNC {words}")).into_bytes()
}

/// A whole outbound stream of one operation with one directory mapping
/// whose tar is `archive`.
pub fn framed_one(archive: &[u8]) -> Vec<u8> {
    let mut v = mark("map 0 0");
    v.extend_from_slice(archive);
    v.extend(mark("op 0"));
    v.extend(mark("end"));
    v
}

/// Ends an archive (two zero blocks, as tar writes).
pub fn end(mut v: Vec<u8>) -> Vec<u8> {
    v.extend_from_slice(&[0; 1024]);
    v
}

fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    end(parts.concat())
}

/// Sets a header's size field to GNU base-256 `size` and re-checksums it.
fn base256(mut h: Vec<u8>, bytes: [u8; 12]) -> Vec<u8> {
    h[124..136].copy_from_slice(&bytes);
    let mut t = tar::Header::from_byte_slice(&h).clone();
    t.set_cksum();
    t.as_bytes().to_vec()
}

/// Every attack fixture, named by class.
pub fn corpus() -> Vec<(&'static str, Vec<u8>)> {
    let big_name = vec![b'n'; 5000];
    let mut chain = Vec::new();
    let mut path = String::new();
    for i in 0..16 {
        let d = format!("{}{i}", "d".repeat(200));
        path = if path.is_empty() {
            d
        } else {
            format!("{path}/{d}")
        };
        chain.push(gnu_long(b'L', format!("{path}/").as_bytes()));
        chain.push(dir(b"placeholder", 0o755));
    }
    chain.push(gnu_long(b'L', format!("{path}/up").as_bytes()));
    chain.push(gnu_long(b'K', "../".repeat(17).as_bytes()));
    chain.push(symlink(b"placeholder", b"x"));
    let mut flood_names = Vec::new();
    for i in 0..300 {
        let deep = vec!["m".repeat(250); 12].join("/");
        flood_names.push(gnu_long(b'L', format!("{deep}{i}").as_bytes()));
        flood_names.push(file(b"x", b""));
    }
    let mut count_flood = Vec::new();
    for i in 0..1500 {
        count_flood.push(file(format!("f{i}").as_bytes(), b""));
    }
    let mut dups = vec![file(b"ok", b"ok")];
    for _ in 0..10_000 {
        dups.push(file(b"same", b"x"));
    }
    vec![
        ("absolute-name", cat(&[file(b"/tmp/moo", b"evil")])),
        (
            "absolute-name-double-slash",
            cat(&[file(b"//tmp/moo", b"evil")]),
        ),
        ("dotdot", cat(&[file(b"../moo", b"evil")])),
        ("dotdot-nested", cat(&[file(b"tmp/../../moo", b"evil")])),
        ("dot-component", cat(&[file(b"./a", b"x")])),
        ("empty-name", cat(&[file(b"", b"x")])),
        (
            "symlink-then-write-relative",
            cat(&[symlink(b"d/twist", b"../.."), file(b"d/twist/x", b"evil")]),
        ),
        (
            "symlink-then-write-absolute",
            cat(&[symlink(b"dirlink", b"/tmp"), file(b"dirlink/moo", b"evil")]),
        ),
        (
            "symlink-then-mkdir",
            cat(&[symlink(b"foo", b".."), dir(b"foo/exploit", 0o755)]),
        ),
        (
            "chained-links-l2-l1",
            cat(&[
                symlink(b"xxx/link1", b".."),
                symlink(b"xxx/link2", b"link1/.."),
                file(b"xxx/link2/evil", b"x"),
            ]),
        ),
        (
            "chained-links-reordered",
            cat(&[
                symlink(b"xxx/link2", b"link1/.."),
                symlink(b"xxx/link1", b".."),
            ]),
        ),
        (
            "dirsymlink2a",
            cat(&[
                symlink(b"cur", b"."),
                symlink(b"par", b"cur/.."),
                file(b"par/moo", b"evil"),
            ]),
        ),
        (
            "dirsymlink2b",
            cat(&[
                symlink(b"cur", b"."),
                symlink(b"cur/par", b".."),
                file(b"par/moo", b"evil"),
            ]),
        ),
        (
            "lone-escaping-symlink",
            cat(&[symlink(b"l", b"../outside/victim")]),
        ),
        ("cve-2019-11249-own-dir", cat(&[symlink(b"xxx", b"../abc")])),
        ("absolute-symlink", cat(&[symlink(b"l", b"/etc/passwd")])),
        (
            "proc-self-root-symlink",
            cat(&[symlink(b"r", b"/proc/self/root")]),
        ),
        ("path-max-chain", end(chain.concat())),
        ("hardlink-absolute", cat(&[hardlink(b"h", b"/etc/passwd")])),
        ("hardlink-dotdot", cat(&[hardlink(b"h", b"../victim")])),
        ("hardlink-missing-target", cat(&[hardlink(b"h", b"nope")])),
        (
            "hardlink-to-escaping-symlink",
            cat(&[symlink(b"s", b"../victim"), hardlink(b"h", b"s")]),
        ),
        (
            "hardlink-through-symlink-chain",
            cat(&[
                symlink(b"a/b/c/up", b"../.."),
                symlink(b"a/b/escape", b"c/up/../.."),
                hardlink(b"exfil", b"a/b/escape/victim"),
            ]),
        ),
        (
            "hardlink-with-payload",
            cat(&[file(b"f", b"x"), {
                let mut v = header(b"h", b'1', 8, 0o644, b"f");
                v.extend_from_slice(&[b'P'; 512]);
                v
            }]),
        ),
        (
            "link-then-same-name-file",
            cat(&[symlink(b"a", b"/x"), file(b"a", b"evil")]),
        ),
        (
            "dir-replaced-by-link",
            cat(&[dir(b"foo", 0o755), symlink(b"foo", b"/outside")]),
        ),
        (
            "file-under-file",
            cat(&[file(b"f", b"x"), file(b"f/x", b"y")]),
        ),
        ("char-device", cat(&[header(b"tty", b'3', 0, 0o644, b"")])),
        ("block-device", cat(&[header(b"sda", b'4', 0, 0o644, b"")])),
        ("fifo", cat(&[header(b"pipe", b'6', 0, 0o644, b"")])),
        ("contiguous-file", cat(&[header(b"c", b'7', 0, 0o644, b"")])),
        ("gnu-sparse", cat(&[header(b"s", b'S', 0, 0o644, b"")])),
        ("pax-global", cat(&[header(b"g", b'g', 0, 0o644, b"")])),
        ("volume-label", cat(&[header(b"v", b'V', 0, 0o644, b"")])),
        ("unknown-type", cat(&[header(b"z", b'Z', 0, 0o644, b"")])),
        ("setuid-file", cat(&[file_mode(b"suid", b"x", 0o4755)])),
        ("setgid-file", cat(&[file_mode(b"sgid", b"x", 0o2755)])),
        ("sticky-dir", cat(&[dir(b"tmp", 0o1777)])),
        (
            "pax-path-dotdot",
            cat(&[pax(&[("path", b"../evil")]), file(b"benign", b"x")]),
        ),
        (
            "pax-linkpath-absolute",
            cat(&[pax(&[("linkpath", b"/etc/shadow")]), symlink(b"l", b"ok")]),
        ),
        (
            "pax-size-larger",
            cat(&[
                pax(&[("size", b"2048")]),
                file(b"a", b"12345678"),
                symlink(b"smuggled", b"/etc"),
            ]),
        ),
        (
            "pax-size-smaller",
            cat(&[pax(&[("size", b"0")]), file(b"a", b"12345678")]),
        ),
        (
            "pax-size-applied-to-long-name",
            cat(&[
                pax(&[("size", b"2048")]),
                gnu_long(b'L', b"file_a"),
                file(b"file_a", b"x"),
                file(b"file_b", b"y"),
            ]),
        ),
        (
            "gnu-long-name-vs-pax-path",
            cat(&[
                gnu_long(b'L', b"a"),
                pax(&[("path", b"b")]),
                file(b"c", b""),
            ]),
        ),
        (
            "two-long-names",
            cat(&[gnu_long(b'L', b"a"), gnu_long(b'L', b"b"), file(b"c", b"")]),
        ),
        (
            "two-pax-headers",
            cat(&[
                pax(&[("path", b"a")]),
                pax(&[("path", b"b")]),
                file(b"c", b""),
            ]),
        ),
        (
            "pax-sparse",
            cat(&[pax(&[("GNU.sparse.size", b"1")]), file(b"c", b"")]),
        ),
        (
            "pax-length-lies",
            cat(&[
                {
                    let mut v = header(b"PaxHeaders/x", b'x', 20, 0o644, b"");
                    v.extend_from_slice(b"99 path=abc\n\0\0\0\0\0\0\0\0");
                    pad(&mut v);
                    v
                },
                file(b"c", b""),
            ]),
        ),
        (
            "gnu-long-name-too-long",
            cat(&[gnu_long(b'L', &big_name), file(b"c", b"")]),
        ),
        (
            "component-over-name-max",
            cat(&[gnu_long(b'L', "c".repeat(300).as_bytes()), file(b"c", b"")]),
        ),
        (
            "gnu-long-link-too-long",
            cat(&[gnu_long(b'K', &big_name), symlink(b"l", b"x")]),
        ),
        (
            "gnu-long-name-record-over-1mib",
            cat(&[header(b"././@LongLink", b'L', (1 << 20) + 1, 0o644, b"")]),
        ),
        (
            "pax-record-over-1mib",
            cat(&[header(b"PaxHeaders/x", b'x', (1 << 20) + 1, 0o644, b"")]),
        ),
        (
            "extension-without-member",
            cat(&[gnu_long(b'L', b"dangling")]),
        ),
        (
            "nul-in-pax-path",
            cat(&[pax(&[("path", b"a\0b")]), file(b"c", b"")]),
        ),
        (
            "nul-in-long-name",
            cat(&[gnu_long(b'L', b"a\0/../../b"), file(b"c", b"")]),
        ),
        // (A newline, a tab or an escape in a name is data, not an attack:
        // `names::*` syncs such names both ways; so is a name that is not
        // UTF-8, where the host takes it back: WIT 0.2.9.)
        (
            "nul-in-link-target",
            cat(&[gnu_long(b'K', b"x\0/../../etc"), symlink(b"l", b"")]),
        ),
        (
            "backslash-dotdot-link",
            cat(&[symlink(b"l", b"..\\..\\x"), symlink(b"m", b"../../y")]),
        ),
        (
            "duplicate-file",
            cat(&[file(b"same", b"1"), file(b"same", b"2")]),
        ),
        ("duplicates-10000", end(dups.concat())),
        ("bad-checksum-mid-stream", {
            let mut v = file(b"ok", b"ok");
            let mut bad = file(b"corrupt", b"x");
            bad[0] ^= 0x20;
            v.extend(bad);
            end(v)
        }),
        ("truncated-mid-content", {
            let mut v = header(b"t", b'0', 4096, 0o644, b"");
            v.extend_from_slice(&[1; 1000]);
            v
        }),
        ("truncated-mid-header", file(b"ok", b"x")[..300].to_vec()),
        ("missing-end-marker", file(b"ok", b"x")),
        ("lone-zero-block-then-data", {
            let mut v = file(b"ok", b"x");
            v.extend_from_slice(&[0; 512]);
            v.extend(file(b"late", b"y"));
            end(v)
        }),
        (
            "absurd-size-base256",
            cat(&[base256(
                header(b"huge", b'0', 0, 0o644, b""),
                [0x80, 0, 0, 0, 0, 0, 0x02, 0x80, 0, 0, 0, 0],
            )]),
        ),
        (
            // Padded to whole blocks it once wrapped to zero: no data, so the
            // payload guard never saw it (found by a parser review).
            "size-near-u64-max-base256",
            cat(&[base256(
                header(b"wrap", b'0', 0, 0o644, b""),
                [
                    0x80, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe,
                ],
            )]),
        ),
        (
            "negative-size-base256",
            cat(&[base256(header(b"neg", b'0', 0, 0o644, b""), [0xff; 12])]),
        ),
        (
            "size-claim-then-eof",
            base256(
                header(b"big", b'0', 0, 0o644, b""),
                [0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x80, 0, 0, 0],
            ),
        ),
        ("entry-count-flood", end(count_flood.concat())),
        ("metadata-flood", end(flood_names.concat())),
        (
            "not-tar-garbage",
            b"Hello, I am definitely not a tar archive.\n".repeat(64),
        ),
        ("all-ones", vec![0xff; 4096]),
        // Issue 11.3: reserved scratch names, which promotion once kept.
        (
            "reserved-scratch-name",
            cat(&[
                dir(b"sub/deeper", 0o755),
                symlink(b"x", b"sub/deeper"),
                symlink(b".paperclip-upload-k", b"x/../.."),
            ]),
        ),
        (
            "reserved-scratch-name-nested",
            cat(&[file(b"d/.paperclip-upload-x", b"")]),
        ),
        // Inside today, outside once `x` becomes a real directory.
        (
            "climb-after-a-name",
            cat(&[
                dir(b"sub/deeper", 0o755),
                symlink(b"x", b"sub/deeper"),
                symlink(b"y", b"x/../.."),
            ]),
        ),
    ]
}

/// A member path of `depth` one-letter components (the deepest a 4096-byte
/// name allows is about 2000): the shape that implied one directory per
/// component and once cost guest memory quadratic in the name's length.
pub fn deep_members(count: usize, depth: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..count {
        let name = format!("t{i}/{}f", "a/".repeat(depth));
        v.extend(gnu_long(b'L', name.as_bytes()));
        v.extend(file(b"placeholder", b"deep"));
    }
    end(v)
}

/// `count` symlinks whose long targets climb and then descend a thousand
/// components: once resolved with a path join per component (twice per
/// link), about 0.1 s of guest CPU each.
pub fn long_link_targets(count: usize) -> Vec<u8> {
    let target = format!("../{}x", "a/".repeat(1000));
    let mut v = dir(b"d", 0o755);
    for i in 0..count {
        v.extend(gnu_long(b'K', target.as_bytes()));
        v.extend(symlink(format!("d/l{i}").as_bytes(), b"placeholder"));
    }
    end(v)
}

/// `count` empty files with distinct names.
pub fn many_files(count: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..count {
        v.extend(file(format!("f{i:07}").as_bytes(), b""));
    }
    end(v)
}
