//! `tar --exclude` semantics for directory mappings.
//!
//! GNU tar's defaults for exclusion patterns are `--no-anchored`,
//! `--wildcards` and `--wildcards-match-slash`: a pattern matches a member if
//! it matches any trailing run of its components, `*` may cross `/`, and an
//! excluded directory is not descended into. The orchestrator always adds
//! `._*` (macOS AppleDouble files), so native and fallback agree.

use glob::{MatchOptions, Pattern};

use crate::SyncError;

/// Patterns every directory mapping excludes, as the orchestrator's tar does.
pub const DEFAULT_EXCLUDES: &[&str] = &["._*"];

/// A compiled set of exclude patterns.
#[derive(Debug, Clone)]
pub struct Excluder {
    patterns: Vec<Pattern>,
}

const OPTIONS: MatchOptions = MatchOptions {
    case_sensitive: true,
    require_literal_separator: false,
    require_literal_leading_dot: false,
};

impl Excluder {
    /// Compiles the default patterns plus `user`.
    ///
    /// # Errors
    /// [`crate::ErrorKind::InvalidRequest`] for a malformed glob.
    pub fn new(user: &[String]) -> Result<Self, SyncError> {
        let mut patterns = Vec::with_capacity(DEFAULT_EXCLUDES.len() + user.len());
        for p in DEFAULT_EXCLUDES
            .iter()
            .copied()
            .chain(user.iter().map(String::as_str))
        {
            // A trailing slash names a directory in tar; members never carry one.
            let p = p.trim_end_matches('/');
            if p.is_empty() {
                continue;
            }
            let compiled = Pattern::new(p)
                .map_err(|e| SyncError::invalid(format!("bad exclude pattern {p:?}: {e}")))?;
            patterns.push(compiled);
        }
        Ok(Excluder { patterns })
    }

    /// True when `rel` (a clean relative path) itself matches a pattern.
    ///
    /// Walkers call this on each entry and skip the subtree of an excluded
    /// directory, which gives tar's "excluded directories are not descended".
    pub fn matches(&self, rel: &str) -> bool {
        if self.patterns.is_empty() {
            return false;
        }
        let mut start = 0;
        loop {
            let suffix = &rel[start..];
            if self
                .patterns
                .iter()
                .any(|p| p.matches_with(suffix, OPTIONS))
            {
                return true;
            }
            match suffix.find('/') {
                Some(i) => start += i + 1,
                None => return false,
            }
        }
    }

    /// True when `rel` or any of its ancestors matches (for flat entry lists).
    pub fn excludes(&self, rel: &str) -> bool {
        let mut end = 0;
        loop {
            let next = rel[end..].find('/').map(|i| end + i);
            let prefix = match next {
                Some(i) => &rel[..i],
                None => rel,
            };
            if self.matches(prefix) {
                return true;
            }
            match next {
                Some(i) => end = i + 1,
                None => return false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(p: &[&str]) -> Excluder {
        Excluder::new(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
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
    }

    #[test]
    fn ancestors_exclude_descendants() {
        let e = ex(&["node_modules"]);
        assert!(e.excludes("node_modules/a/b.js"));
        assert!(e.excludes("p/node_modules/a"));
        assert!(!e.excludes("p/a"));
    }

    #[test]
    fn appledouble_excluded_by_default() {
        let e = ex(&[]);
        assert!(e.matches("._foo"));
        assert!(e.matches("d/._foo"));
        assert!(!e.matches("foo._"));
    }

    #[test]
    fn bad_pattern_is_invalid_request() {
        let err = Excluder::new(&["[".to_string()]).unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::InvalidRequest);
    }
}
