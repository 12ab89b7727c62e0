//! The exclude rule and its `fnmatch`, held to what GNU tar 1.34 on glibc
//! 2.36 does (each case was observed against the real tar).

use super::fnmatch::{Glob, Mode};
use super::*;

fn ex(p: &[&str]) -> Excluder {
    Excluder::new(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
}

/// glibc's `fnmatch(pattern, name, FNM_LEADING_DIR)`: anchored, by
/// characters and then by bytes.
fn fnm(pattern: &str, name: &str) -> bool {
    let wide = Glob::new(
        &pattern.chars().map(u32::from).collect::<Vec<_>>(),
        Mode::Wide,
    );
    let bytes = Glob::new(
        &pattern.bytes().map(u32::from).collect::<Vec<_>>(),
        Mode::Bytes,
    );
    wide.run(&name.chars().map(u32::from).collect::<Vec<_>>(), false)
        || bytes.run(&name.bytes().map(u32::from).collect::<Vec<_>>(), false)
}

#[test]
fn unanchored_and_slash_crossing() {
    let e = ex(&["*.log", "node_modules", "build/*"]);
    assert!(e.matches("a.log"));
    assert!(e.matches("x/y/a.log"));
    assert!(e.matches("pkg/node_modules"));
    assert!(e.matches("x/build/out/a"));
    assert!(!e.matches("a.txt"));
    assert!(!e.matches("node_modules_x"));
    assert!(!e.matches("build"));
}

#[test]
fn star_and_question_cross_slash() {
    assert!(fnm("a*c", "ab/bc"));
    assert!(fnm("a?c", "a/c"));
    assert!(fnm("a?c", "abc"));
    assert!(!fnm("a?c", "ac"));
    assert!(fnm("*/x", "a/b/x"));
    assert!(fnm("**", ""));
    assert!(fnm("*", ".hidden"), "no FNM_PERIOD");
    assert!(!fnm("A*", "abc"), "no case folding");
}

#[test]
fn leading_dir_and_unanchored_starts() {
    // FNM_LEADING_DIR: the match may stop at a `/`.
    assert!(fnm("a", "a/b/c"));
    assert!(fnm("a/b", "a/b/c"));
    assert!(!fnm("a/b", "a/bc"));
    assert!(!fnm("a", "ab"));
    let e = ex(&["b?"]);
    assert!(e.matches("x/bc"));
    assert!(e.matches("x/bc/d"));
    assert!(!e.matches("xbc"));
    assert!(!e.matches("x/b"));
    let e = ex(&["*/sub/*"]);
    assert!(e.matches("a/sub/x"));
    assert!(e.matches("q/a/sub/x/y"));
    assert!(!e.matches("sub/x"));
}

#[test]
fn literal_patterns_use_tar_hash_semantics() {
    let e = ex(&["a/b"]);
    assert!(e.matches("a/b"));
    assert!(e.matches("x/a/b"));
    assert!(e.matches("a/b/c"));
    assert!(!e.matches("a/bc"));
    assert!(!e.matches("xa/b"));
    // Escapes are removed; `]` is no wildcard.
    let e = ex(&["secret\\*", "x]"]);
    assert!(e.matches("secret*"));
    assert!(e.matches("d/secret*"));
    assert!(!e.matches("secretX"));
    assert!(!e.matches("secret"));
    assert!(e.matches("x]"));
    // A trailing lone backslash is kept as a character.
    let e = ex(&["a\\"]);
    assert!(e.matches("a\\"));
    assert!(e.matches("d/a\\"));
    assert!(!e.matches("a"));
    let e = ex(&["a\\\\b"]);
    assert!(e.matches("a\\b"));
}

#[test]
fn trailing_slash_dot_slash_and_empty_match_nothing() {
    for p in ["dir/", "*/", "d*/", "./a", "/a", "", "/", "."] {
        let e = Excluder::new(&[p.to_string()]).unwrap();
        for name in ["dir", "dir/x", "a", "x/a", "d", "d/e/f", "._x"] {
            assert_eq!(e.matches(name), name == "._x", "{p:?} vs {name:?}");
        }
    }
}

#[test]
fn trailing_backslash_in_a_wildcard_pattern_never_matches() {
    assert!(!fnm("a*\\", "a\\"));
    assert!(!fnm("a*\\", "ab"));
    assert!(!ex(&["*\\"]).matches("x\\"));
}

#[test]
fn backslash_escapes_outside_and_inside_brackets() {
    assert!(fnm("\\*", "*"));
    assert!(!fnm("\\*", "a"));
    assert!(fnm("\\[x\\]", "[x]"));
    assert!(!fnm("\\[x\\]", "x"));
    assert!(fnm("[\\]]", "]"));
    assert!(fnm("[a\\-z]", "-"));
    assert!(!fnm("[a\\-z]", "b"));
    assert!(fnm("[\\!a]", "!"));
    assert!(fnm("[a-\\z]", "m"));
    // `[\` at the end of the pattern fails rather than going literal.
    assert!(!fnm("[\\", "["));
}

#[test]
fn negation_and_leading_close_bracket() {
    for neg in ["!", "^"] {
        let p = format!("[{neg}a]*.key");
        assert!(fnm(&p, "b.key"));
        assert!(fnm(&p, "1.key"));
        assert!(!fnm(&p, "a.key"));
    }
    assert!(fnm("[]]*", "]x"));
    assert!(!fnm("[]]*", "x"));
    assert!(fnm("[!]]", "x"));
    assert!(!fnm("[!]]", "]"));
    assert!(fnm("[]a]", "a"));
    // `[!]` alone is unterminated: a literal `[` then `!`.
    assert!(fnm("[!]", "[!]"));
    assert!(!fnm("[!]", "x"));
}

#[test]
fn ranges() {
    assert!(fnm("[a-c]*", "b1"));
    assert!(!fnm("[a-c]*", "d"));
    assert!(fnm("[a-]", "-"));
    assert!(fnm("[a-]", "a"));
    assert!(fnm("[-a]", "-"));
    assert!(!fnm("[c-a]", "b"), "a reversed range is empty");
    assert!(!fnm("[c-a]", "c"));
    assert!(fnm("[Z-a]", "_"), "ranges compare code points");
    assert!(fnm("*.[ch]", "x.c"));
    assert!(!fnm("*.[ch]", "x.o"));
    assert!(fnm("[[.a.]-c]", "b"));
    assert!(fnm("[a-[.c.]]", "b"));
    // Within U+0001..U+00FF ranges compare code points.
    assert!(fnm("[a-é]", "b"));
    assert!(fnm("[à-ÿ]", "á"));
    assert!(!fnm("[a-é]", "ü"));
    // C.UTF-8's collation sequence stops at U+00FF: a range ending
    // beyond it matches only its start, one starting beyond it nothing.
    assert!(fnm("[à-Ā]", "à"));
    assert!(!fnm("[à-Ā]", "á"));
    assert!(!fnm("[Ā-ž]", "ć"));
}

#[test]
fn posix_classes() {
    let cases: &[(&str, &str, bool)] = &[
        ("[[:digit:]]*.key", "1.key", true),
        ("[[:digit:]]*.key", "a.key", false),
        ("[[:alpha:]]", "é", true),
        ("[[:alpha:]]", "1", false),
        ("[[:alnum:]]", "7", true),
        ("[[:alnum:]]", "_", false),
        ("[[:upper:]]*", "Readme", true),
        ("[[:upper:]]*", "readme", false),
        ("[[:upper:]]", "É", true),
        ("[[:lower:]]", "é", true),
        ("[[:lower:]]", "E", false),
        ("[[:space:]]", " ", true),
        ("[[:space:]]", "\t", true),
        ("[[:space:]]", "x", false),
        ("[[:blank:]]", "\t", true),
        ("[[:blank:]]", "\n", false),
        ("[[:punct:]]", "-", true),
        ("[[:punct:]]", "a", false),
        ("[[:print:]]", " ", true),
        ("[[:print:]]", "\u{7}", false),
        ("[[:graph:]]", " ", false),
        ("[[:graph:]]", "é", true),
        ("[[:cntrl:]]", "\u{1b}", true),
        ("[[:cntrl:]]", "a", false),
        ("[[:xdigit:]]", "F", true),
        ("[[:xdigit:]]", "g", false),
        ("[[:combining:]]", "\u{301}", true),
        ("[![:digit:]]", "a", true),
        ("[![:digit:]]", "5", false),
        ("[[:digit:][:upper:]]", "Q", true),
        ("[[:alpha:]-z]", "-", true),
        // An unknown class never matches; one that is not a name makes
        // `[` an ordinary member.
        ("[[:nope:]]", "n", false),
        ("[[:nope:]]", "[", false),
        ("[[:a1]", "1", true),
        ("[[:a1]", "[", true),
        ("[[:a1]", "b", false),
    ];
    for &(p, n, want) in cases {
        assert_eq!(fnm(p, n), want, "{p:?} vs {n:?}");
    }
}

#[test]
fn equivalence_and_collating_forms() {
    assert!(fnm("[[=a=]]", "a"));
    assert!(!fnm("[[=a=]]", "A"));
    assert!(!fnm("[[=é=]]", "e"));
    assert!(fnm("[[=é=]]", "é"));
    assert!(fnm("[[.-.]]", "-"));
    assert!(fnm("[[.].]]", "]"));
    // Multi-character names need collation data a UTF-8 C locale lacks.
    assert!(!fnm("[[.ab.]]", "a"));
    assert!(!fnm("[[.hyphen.]]", "-"));
    // glibc's quirk: a collating symbol before `-]` is neither.
    assert!(!fnm("[[.a.]-]", "a"));
    assert!(fnm("[[.a.]-]", "-"));
    // Not an equivalence class: `[` is a member.
    assert!(fnm("[[=a]", "["));
    assert!(fnm("[[=a]", "="));
}

#[test]
fn unterminated_bracket_is_a_literal() {
    assert!(fnm("[", "["));
    assert!(!fnm("[", "a"));
    assert!(fnm("[a", "[a"));
    assert!(!fnm("[a", "a"));
    assert!(fnm("[[", "[["));
    assert!(fnm("x[*", "x[yz"));
    assert!(!fnm("[a-", "[a-"), "a dangling range fails");
    let e = ex(&["["]);
    assert!(e.matches("["));
    assert!(e.matches("d/["));
    assert!(e.matches("[/x"));
    assert!(!e.matches("a"));
}

#[test]
fn matches_by_character_then_by_byte() {
    assert!(fnm("é*", "été"));
    assert!(fnm("?t?", "été"));
    assert!(fnm("[é]", "é"));
    assert!(fnm("日?", "日本"));
    assert!(!fnm("?", "日本"));
    // glibc retries byte by byte when the character match fails.
    assert!(fnm("??", "ü"));
    assert!(fnm("??????", "日本"));
    assert!(fnm("[é]?", "ü"), "é and ü share their first byte");
    assert!(!fnm("[[:alpha:]][[:alpha:]]", "ü"), "bytes are in no class");
    // `[=é=]` read by bytes is a bracket ending at the first `]`.
    assert!(fnm("[[=é=]]", "=]"));
    let e = ex(&["[é]*"]);
    assert!(e.matches("dir/ü.txt"));
    assert!(!e.matches("dir/u.txt"));
}

#[test]
fn hostile_inputs_stay_linear() {
    let name = "a".repeat(4000) + "/" + &"a/".repeat(1000);
    let e = ex(&["*a*a*a*a*a*a*a*a*b", "a?a?a?a?a?a?a?b", "[a][a][a]*[b]"]);
    let t = std::time::Instant::now();
    for i in 0..20 {
        assert!(!e.matches(&name[..name.len() - i]));
    }
    let wide = "é".repeat(3000);
    assert!(!ex(&["*é*é*é*é*é*é*b"]).matches(&wide));
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
    // Pathological patterns compile and run too.
    let p = "[".repeat(3000) + &"*[:".repeat(500) + "[.";
    let e = ex(&[&p]);
    assert!(!e.matches("[[[x"));
}

#[test]
fn ancestors_exclude_descendants() {
    let e = ex(&["node_modules", "*.tmp", "a/b"]);
    assert!(e.excludes("node_modules/a/b.js"));
    assert!(e.excludes("p/node_modules/a"));
    assert!(e.excludes("x.tmp/y"));
    assert!(e.excludes("q/a/b/c"));
    assert!(!e.excludes("p/a"));
    // `excludes` is the ancestor walk over `matches`.
    let e = ex(&["b?", "[!x]/c", "a/b", "*z", "\\[q"]);
    for rel in ["a/b/c/d", "x/c/q", "y/c/z/w", "[q/r", "bb", "q/bz/1"] {
        let mut walk = false;
        for (i, _) in rel.match_indices('/').chain([(rel.len(), "")]) {
            walk |= e.matches(&rel[..i]);
        }
        assert_eq!(e.excludes(rel), walk, "{rel}");
    }
}

#[test]
fn appledouble_excluded_by_default() {
    let e = ex(&[]);
    assert!(e.matches("._foo"));
    assert!(e.matches("d/._foo"));
    assert!(!e.matches("foo._"));
}

#[test]
fn patterns_tar_accepts_are_accepted() {
    for p in [
        "[",
        "a\\",
        "[[:nope:]]",
        "[z-a]",
        "[[.xyz.]]",
        "**",
        "\\",
        "]",
    ] {
        assert!(Excluder::new(&[p.to_string()]).is_ok(), "{p:?}");
    }
    // Only NUL, which no tar argument can carry, is refused.
    let err = Excluder::new(&["a\0b".to_string()]).unwrap_err();
    assert_eq!(err.kind, crate::ErrorKind::InvalidRequest);
}

/// Names that are not UTF-8, spelled out as the hosts hand them over:
/// matched by bytes, as tar 1.34 in C.UTF-8 excluded them.
#[test]
fn names_that_are_not_utf8_match_by_bytes() {
    let name = |b: &[u8]| crate::byte_name::encode_path(b).into_owned();
    let (log, txt) = (name(b"caf\xe9.log"), name(b"caf\xe9.txt"));
    let nm = name(b"node_modules/\xff");
    let xy = name(b"x\xe9\xe9y");
    for (pattern, excluded) in [
        ("*.log", vec![&log]),
        ("caf?.log", vec![&log]),
        ("node_modules", vec![&nm]),
        ("x??y", vec![&xy]),
        ("x?y", vec![]),
        ("x*y", vec![&xy]),
        ("*[\u{e9}]*", vec![]),
        ("caf[!a].txt", vec![&txt]),
    ] {
        let e = ex(&[pattern]);
        let got: Vec<&String> = [&log, &txt, &nm, &xy]
            .into_iter()
            .filter(|n| e.matches(n))
            .collect();
        assert_eq!(got, excluded, "{pattern}");
    }
}
