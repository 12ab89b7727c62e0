//! `tar --exclude` semantics for directory mappings, as GNU tar 1.34 (on
//! glibc 2.36, in a UTF-8 locale) applies them when it creates an archive.
//!
//! GNU tar's defaults for exclusion are `--wildcards`, `--no-anchored`,
//! `--wildcards-match-slash` and recursion, so every pattern goes to
//! gnulib's `exclude` module with `EXCLUDE_WILDCARDS | FNM_LEADING_DIR`,
//! which does one of two things (observed against the real tar, and
//! reproduced here):
//!
//! - A pattern with no unescaped `*`, `?` or `[` (`]` does not count) is a
//!   *literal*: its backslashes are removed (`\x` becomes `x`; a trailing lone
//!   `\` stays) and it excludes a member when it equals the member's name
//!   with any number of leading components *and* any number of trailing
//!   components removed. So `a/b` excludes `a/b`, `x/a/b` and `a/b/c`, and
//!   `a\` excludes a file literally named `a\`.
//! - Any other pattern goes to `fnmatch(3)` with `FNM_LEADING_DIR` (a match
//!   may stop at any `/`), first against the whole name and then against the
//!   rest after every `/` that is not followed by another `/`.
//!
//! Consequences worth knowing: a pattern with a trailing `/` (`dir/`, `*/`)
//! never matches anything, because member names never end with `/`; `./a`
//! and `/a` never match either, and neither does the empty pattern. An
//! excluded directory is not descended into, so walkers skip the subtree of
//! any entry for which [`Excluder::matches`] is true.
//!
//! Patterns with wildcards are matched by `fnmatch` (`exclude/fnmatch.rs`), a port of glibc
//! 2.36's `fnmatch(3)` that never backtracks; the tests (`tests.rs`) hold
//! both layers to what the real tar does.
//!
//! The orchestrator always adds `._*` (macOS AppleDouble files), so native
//! and fallback agree.

mod fnmatch;
#[cfg(test)]
mod tests;

use self::fnmatch::{Glob, Mode};
use crate::Error;

/// Patterns every directory mapping excludes, as the orchestrator's tar does.
pub const DEFAULT_EXCLUDES: &[&str] = &["._*"];

/// A compiled set of exclude patterns.
#[derive(Debug, Clone)]
pub struct Excluder {
    patterns: Vec<Compiled>,
}

/// One pattern, in the form gnulib's `exclude` module stores it.
#[derive(Debug, Clone)]
enum Compiled {
    /// No wildcards: kept (unescaped) in gnulib's hash table of names.
    Literal(String),
    /// Matched with `fnmatch`, by characters and then by bytes.
    Glob {
        wide: Glob,
        bytes: Glob,
        ascii: bool,
    },
}

impl Excluder {
    /// Compiles the default patterns plus `user`.
    ///
    /// Every pattern GNU tar accepts compiles; malformed bracket expressions
    /// behave as tar treats them rather than being refused.
    ///
    /// # Errors
    /// [`crate::ErrorKind::InvalidRequest`] for a pattern containing NUL,
    /// which cannot be passed to tar at all.
    pub fn new(user: &[String]) -> Result<Self, Error> {
        let mut patterns = Vec::with_capacity(DEFAULT_EXCLUDES.len() + user.len());
        for p in DEFAULT_EXCLUDES
            .iter()
            .copied()
            .chain(user.iter().map(String::as_str))
        {
            if p.contains('\0') {
                return Err(Error::invalid(format!(
                    "exclude pattern {p:?} contains a NUL character"
                )));
            }
            patterns.push(if has_wildcards(p) {
                Compiled::Glob {
                    wide: Glob::new(&p.chars().map(u32::from).collect::<Vec<_>>(), Mode::Wide),
                    bytes: Glob::new(&p.bytes().map(u32::from).collect::<Vec<_>>(), Mode::Bytes),
                    ascii: p.is_ascii(),
                }
            } else {
                Compiled::Literal(unescape(p))
            });
        }
        Ok(Excluder { patterns })
    }

    /// True when tar would exclude the member `rel` (a clean relative path
    /// such as `a/b/c`).
    ///
    /// Walkers call this on each entry and skip the subtree of an excluded
    /// directory, which gives tar's "excluded directories are not descended".
    pub fn matches(&self, rel: &str) -> bool {
        // A name that is not UTF-8 (spelled out, see `byte_name`): glibc's
        // fnmatch cannot convert it to characters and matches bytes.
        if crate::byte_name::has_encoded(rel) {
            if let Some(raw) = crate::byte_name::decode_path(rel) {
                return self.matches_bytes(&raw);
            }
        }
        let mut chars: Option<Vec<u32>> = None;
        let mut bytes: Option<Vec<u32>> = None;
        for p in &self.patterns {
            let hit = match p {
                Compiled::Literal(lit) => literal_matches(lit.as_bytes(), rel.as_bytes()),
                Compiled::Glob {
                    wide,
                    bytes: b,
                    ascii,
                } => {
                    wide.matches(chars.get_or_insert_with(|| rel.chars().map(u32::from).collect()))
                        // With only ASCII on both sides the byte pass is the
                        // same computation.
                        || ((!ascii || !rel.is_ascii())
                            && b.matches(
                                bytes.get_or_insert_with(|| rel.bytes().map(u32::from).collect()),
                            ))
                }
            };
            if hit {
                return true;
            }
        }
        false
    }

    /// [`Excluder::matches`] for a name that is not UTF-8: literals and
    /// the byte pass only.
    fn matches_bytes(&self, rel: &[u8]) -> bool {
        let bytes: Vec<u32> = rel.iter().map(|&b| u32::from(b)).collect();
        self.patterns.iter().any(|p| match p {
            Compiled::Literal(lit) => literal_matches(lit.as_bytes(), rel),
            Compiled::Glob { bytes: b, .. } => b.matches(&bytes),
        })
    }

    /// True when `rel` or any of its ancestors matches (for flat entry lists).
    ///
    /// Because tar matches with `FNM_LEADING_DIR` (and its literal patterns
    /// likewise ignore trailing components), a pattern that matches an
    /// ancestor already matches every descendant, so this is
    /// [`Excluder::matches`]; it exists to name the intent at call sites.
    pub fn excludes(&self, rel: &str) -> bool {
        self.matches(rel)
    }
}

/// gnulib's `fnmatch_pattern_has_wildcards` for `EXCLUDE_WILDCARDS`: an
/// unescaped `*`, `?` or `[`. A backslash hides the character after it.
fn has_wildcards(p: &str) -> bool {
    let mut it = p.chars();
    while let Some(c) = it.next() {
        match c {
            '\\' => {
                it.next();
            }
            '*' | '?' | '[' => return true,
            _ => {}
        }
    }
    false
}

/// gnulib's `unescape_pattern`: `\x` becomes `x`; a trailing `\` stays.
fn unescape(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    let mut it = p.chars().peekable();
    while let Some(c) = it.next() {
        match (c, it.peek()) {
            ('\\', Some(&next)) => {
                out.push(next);
                it.next();
            }
            _ => out.push(c),
        }
    }
    out
}

/// gnulib's hash lookup with `FNM_LEADING_DIR` and no anchoring: `lit`
/// equals the name after dropping leading components (at every `/`) and then
/// trailing ones (at every `/`).
fn literal_matches(lit: &[u8], rel: &[u8]) -> bool {
    let mut start = 0;
    loop {
        let rest = &rel[start..];
        if let Some(after) = rest.strip_prefix(lit) {
            if after.is_empty() || after.starts_with(b"/") {
                return true;
            }
        }
        match rest.iter().position(|&b| b == b'/') {
            Some(i) => start += i + 1,
            None => return false,
        }
    }
}
