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
//! The `fnmatch` here is a port of glibc 2.36's: `*` and `?` match `/`
//! too, there is no special leading-dot rule and no case folding, backslash
//! escapes work inside and outside brackets, and bracket expressions follow
//! glibc's scanner, quirks included (an unterminated `[` is a literal `[`;
//! `!` and `^` negate; a `]` first in the list is literal; `[=c=]` and
//! `[.c.]` take one character; malformed forms such as `[[:nope:]]` or
//! `[[.ab.]]` make that position fail to match instead of being errors).
//! In a UTF-8 locale glibc first matches by characters and, when that
//! fails, matches again by bytes; so does this (see `Mode` below for how
//! the two passes differ).
//!
//! Matching never backtracks: a pattern is compiled to a small automaton over
//! pattern positions and run once over the name, trying every unanchored
//! start in the same pass, so the cost is O(pattern × name) for ordinary
//! patterns whatever the input (a bracket expression costs its own length
//! per step). Names and patterns may be hostile.
//!
//! The orchestrator always adds `._*` (macOS AppleDouble files), so native
//! and fallback agree.

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
        let mut chars: Option<Vec<u32>> = None;
        let mut bytes: Option<Vec<u32>> = None;
        for p in &self.patterns {
            let hit = match p {
                Compiled::Literal(lit) => literal_matches(lit, rel),
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
fn literal_matches(lit: &str, rel: &str) -> bool {
    let mut start = 0;
    loop {
        let rest = &rel[start..];
        if let Some(after) = rest.strip_prefix(lit) {
            if after.is_empty() || after.starts_with('/') {
                return true;
            }
        }
        match rest.find('/') {
            Some(i) => start += i + 1,
            None => return false,
        }
    }
}

/// How glibc's `fnmatch` reads pattern and name.
///
/// In a multibyte locale it converts both to wide characters and matches
/// those; if that does not match it matches the raw bytes as well (so `??`
/// matches the one-character name `ü`). The two passes differ beyond ASCII
/// only in what the units are and in two lookups:
///
/// - classes: characters use the locale's classes; a byte of a multibyte
///   sequence belongs to none;
/// - ranges: bytes compare by value; characters compare by the locale's
///   collation sequence, which in glibc's `C.UTF-8` only knows U+0001 to
///   U+00FF (in code point order). A character beyond that never falls in
///   a range, a range whose start is beyond it never matches, and a range
///   whose end is beyond it matches only its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Wide,
    Bytes,
}

impl Mode {
    fn in_class(self, class: Class, unit: u32) -> bool {
        match self {
            Mode::Wide => char::from_u32(unit).is_some_and(|c| class.contains(c)),
            Mode::Bytes => unit < 0x80 && char::from_u32(unit).is_some_and(|c| class.contains(c)),
        }
    }

    fn in_range(self, lo: u32, hi: u32, unit: u32) -> bool {
        match self {
            Mode::Bytes => lo <= unit && unit <= hi,
            Mode::Wide => {
                // glibc's fcollseq, lcollseq and hcollseq.
                let seq = |c: u32| (1..=0xff).contains(&c).then_some(c);
                let Some(f) = seq(unit) else {
                    return false;
                };
                match (seq(lo), seq(hi)) {
                    (Some(l), Some(h)) => l <= f && f <= h,
                    (Some(l), None) => l == f,
                    (None, _) => false,
                }
            }
        }
    }
}

// Pattern units are characters or bytes as `u32`; these are the ASCII ones
// glibc's scanner looks at. `NUL` marks the end, as in C.
const NUL: u32 = 0;
const STAR: u32 = '*' as u32;
const QUESTION: u32 = '?' as u32;
const BACKSLASH: u32 = '\\' as u32;
const OPEN: u32 = '[' as u32;
const CLOSE: u32 = ']' as u32;
const COLON: u32 = ':' as u32;
const EQUALS: u32 = '=' as u32;
const DOT: u32 = '.' as u32;
const DASH: u32 = '-' as u32;
const BANG: u32 = '!' as u32;
const CARET: u32 = '^' as u32;
const SLASH: u32 = '/' as u32;

/// A pattern compiled for `fnmatch` in one [`Mode`].
///
/// The automaton's states are pattern positions; `elems.len()` is the state
/// "whole pattern matched". Every element except `*` consumes exactly one
/// unit, so tracking the set of live positions while reading the name once
/// decides the match (this is what glibc's backtracking computes).
#[derive(Debug, Clone)]
struct Glob {
    /// What starts at each pattern position, read as a pattern element.
    elems: Vec<Elem>,
    /// What starts at each pattern position, read as a member of a bracket
    /// expression (one more than the pattern length: the end).
    items: Vec<Item>,
    mode: Mode,
}

#[derive(Debug, Clone, Copy)]
enum Elem {
    /// `*`: any run of units, `/` included.
    Star,
    /// `?`: any one unit, `/` included.
    Any,
    /// This unit, then continue at the given position (an escape `\x`
    /// skips two positions).
    Unit(u32, usize),
    /// A trailing lone `\`: glibc's "trailing \ loses".
    Never,
    /// A `[`: glibc's scan of the list starts with the item at `first`.
    Bracket { negated: bool, first: usize },
}

impl Glob {
    fn new(pat: &[u32], mode: Mode) -> Glob {
        let elems = (0..pat.len())
            .map(|p| match at(pat, p) {
                STAR => Elem::Star,
                QUESTION => Elem::Any,
                BACKSLASH => match pat.get(p + 1) {
                    Some(&u) => Elem::Unit(u, p + 2),
                    None => Elem::Never,
                },
                OPEN => {
                    let negated = matches!(at(pat, p + 1), BANG | CARET);
                    Elem::Bracket {
                        negated,
                        first: p + 1 + usize::from(negated),
                    }
                }
                u => Elem::Unit(u, p + 1),
            })
            .collect();
        Glob {
            elems,
            items: Scanner::new(pat).items(),
            mode,
        }
    }

    /// `exclude_fnmatch` without `EXCLUDE_ANCHORED`: `fnmatch(pattern, name,
    /// FNM_LEADING_DIR)` on `name` and on the rest after each `/` that is not
    /// followed by `/`, all in one pass.
    fn matches(&self, name: &[u32]) -> bool {
        self.run(name, true)
    }

    /// Runs the automaton over `name`, starting at 0 and, when `unanchored`,
    /// also after every `/` not followed by `/`. True when the whole pattern
    /// matched up to the end of the name or up to a `/` (FNM_LEADING_DIR).
    fn run(&self, name: &[u32], unanchored: bool) -> bool {
        let done = self.elems.len();
        let mut cur = StateSet::new(done + 1);
        let mut next = StateSet::new(done + 1);
        for i in 0..=name.len() {
            let start =
                i == 0 || (unanchored && name[i - 1] == SLASH && name.get(i) != Some(&SLASH));
            if start {
                self.add(&mut cur, 0);
            }
            let Some(&unit) = name.get(i) else {
                return cur.contains(done);
            };
            if unit == SLASH && cur.contains(done) {
                return true;
            }
            next.clear();
            for &p in &cur.list {
                match self.elems.get(p) {
                    Some(Elem::Star) => self.add(&mut next, p),
                    Some(Elem::Any) => self.add(&mut next, p + 1),
                    Some(&Elem::Unit(u, to)) if u == unit => self.add(&mut next, to),
                    Some(&Elem::Bracket { negated, first }) => {
                        if let Some(to) = self.bracket(p, negated, first, unit) {
                            self.add(&mut next, to);
                        }
                    }
                    _ => {}
                }
            }
            std::mem::swap(&mut cur, &mut next);
        }
        false
    }

    /// Adds state `p` and, since `*` may match nothing, the states after any
    /// run of `*` starting there.
    fn add(&self, set: &mut StateSet, mut p: usize) {
        while set.insert(p) {
            match self.elems.get(p) {
                Some(Elem::Star) => p += 1,
                _ => return,
            }
        }
    }

    /// The transition out of the `[` at position `open` on `unit`: glibc's
    /// scan of the list, item by item, until a member matches or the scan
    /// ends.
    fn bracket(&self, open: usize, negated: bool, first: usize, unit: u32) -> Option<usize> {
        // "[ unterminated, treat as normal character": the `[` matches itself
        // and matching resumes right after it.
        let literal = || (unit == OPEN).then_some(open + 1);
        let mut x = first;
        let exhausted = loop {
            let Some(item) = self.items.get(x) else {
                break Outcome::Unterminated;
            };
            for &(set, after) in item.tests.iter().flatten() {
                if set.contains(unit, self.mode) {
                    // glibc's `matched:`, then skipping to the closing `]`.
                    return match after {
                        Outcome::Closed(next) => (!negated).then_some(next),
                        Outcome::Unterminated => literal(),
                        Outcome::Fail => None,
                    };
                }
            }
            match item.then {
                Then::Item(y) => x = y,
                Then::End(end) => break end,
            }
        };
        match exhausted {
            // The scan reached the closing `]` without a match.
            Outcome::Closed(next) => negated.then_some(next),
            Outcome::Unterminated => literal(),
            Outcome::Fail => None,
        }
    }
}

/// A set of automaton states with O(1) insert and iteration over members.
struct StateSet {
    member: Vec<bool>,
    list: Vec<usize>,
}

impl StateSet {
    fn new(n: usize) -> StateSet {
        StateSet {
            member: vec![false; n],
            list: Vec::new(),
        }
    }
    fn insert(&mut self, p: usize) -> bool {
        match self.member.get_mut(p) {
            Some(m) if !*m => {
                *m = true;
                self.list.push(p);
                true
            }
            _ => false,
        }
    }
    fn contains(&self, p: usize) -> bool {
        self.member.get(p).copied().unwrap_or(false)
    }
    fn clear(&mut self) {
        for &p in &self.list {
            if let Some(m) = self.member.get_mut(p) {
                *m = false;
            }
        }
        self.list.clear();
    }
}

/// Reads pattern position `i`, with C's terminating NUL past the end
/// (patterns never contain NUL: [`Excluder::new`] refuses it).
fn at(pat: &[u32], i: usize) -> u32 {
    pat.get(i).copied().unwrap_or(NUL)
}

/// Whether `u` may appear in a class name: glibc accepts `a` to `y` (sic).
fn class_name_unit(u: u32) -> bool {
    (u32::from(b'a')..u32::from(b'z')).contains(&u)
}

/// glibc's `CHAR_CLASS_MAX_LENGTH` (`CHARCLASS_NAME_MAX`).
const CLASS_NAME_MAX: usize = 2048;

/// How glibc's scan of a bracket expression ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// At the closing `]`; matching continues at this position.
    Closed(usize),
    /// At the end of the pattern: the `[` is an ordinary character.
    Unterminated,
    /// A malformed member: glibc returns `FNM_NOMATCH` for this position.
    Fail,
}

/// One member of a bracket expression's list as glibc's scan reads it at a
/// given position, whichever `[` the scan started from: what it tests (in
/// order; each with where skipping the rest of the expression ends up), and
/// where the scan goes when none of that matched.
#[derive(Debug, Clone, Copy)]
struct Item {
    tests: [Option<(Set, Outcome)>; 2],
    then: Then,
}

#[derive(Debug, Clone, Copy)]
enum Then {
    /// The next member starts here.
    Item(usize),
    /// The scan is over.
    End(Outcome),
}

/// What one member of a bracket expression accepts.
#[derive(Debug, Clone, Copy)]
enum Set {
    Unit(u32),
    Range(u32, u32),
    Class(Class),
}

impl Set {
    fn contains(self, unit: u32, mode: Mode) -> bool {
        match self {
            Set::Unit(x) => unit == x,
            Set::Range(lo, hi) => mode.in_range(lo, hi, unit),
            Set::Class(k) => mode.in_class(k, unit),
        }
    }
}

/// How a `[:` in a bracket expression reads.
enum ClassScan {
    Class(Class),
    /// An unknown or overlong name: glibc fails the position.
    Invalid,
    /// Not a name at all: the `[` is an ordinary member.
    NotAName,
}

/// Reads bracket expressions the way glibc's `internal_fnmatch` does, in a
/// locale without collation rules (`C.UTF-8`) and with `POSIXLY_CORRECT`
/// unset (so `^` negates like `!`).
struct Scanner<'a> {
    pat: &'a [u32],
    /// For each position, the first `.` at or after it that is followed by
    /// `]`: where a collating symbol `[.c.]` ends.
    dot_close: Vec<Option<usize>>,
    /// Memoised results of [`Scanner::skip`].
    skips: Vec<Option<Outcome>>,
}

impl Scanner<'_> {
    fn new(pat: &[u32]) -> Scanner<'_> {
        let mut dot_close = vec![None; pat.len() + 2];
        for r in (0..pat.len()).rev() {
            dot_close[r] = if pat[r] == DOT && at(pat, r + 1) == CLOSE {
                Some(r)
            } else {
                dot_close[r + 1]
            };
        }
        Scanner {
            pat,
            dot_close,
            skips: vec![None; pat.len() + 2],
        }
    }

    fn at(&self, i: usize) -> u32 {
        at(self.pat, i)
    }

    /// For `[.` with the `.` at `dot`: the position after the closing `.]`,
    /// or `None` when the pattern ends first.
    fn collating_end(&self, dot: usize) -> Option<usize> {
        self.dot_close
            .get(dot + 1)
            .copied()
            .flatten()
            .map(|r| r + 2)
    }

    /// The item at every position (and at the end).
    fn items(mut self) -> Vec<Item> {
        (0..=self.pat.len()).map(|x| self.item(x)).collect()
    }

    /// One pass of the loop in glibc's bracket branch, with the member's
    /// first unit at `x`.
    fn item(&mut self, x: usize) -> Item {
        let mut tests = [None, None];
        let end = |tests, outcome| Item {
            tests,
            then: Then::End(outcome),
        };
        let mut c = self.at(x);
        let mut p = x + 1;
        // glibc's `normal_bracket` label: one unit that may start a range.
        let mut normal = None;
        // glibc's `cold`: the lower end of a possible range.
        let mut range_from = None;
        if c == BACKSLASH {
            if self.at(p) == NUL {
                return end(tests, Outcome::Fail);
            }
            normal = Some(self.at(p));
            p += 1;
        } else if c == OPEN && self.at(p) == COLON {
            // `[:name:]`; a unit outside `a`..`y` on the way means it was no
            // class after all and `[` is an ordinary member.
            let start = p;
            let mut name = String::new();
            let scan = loop {
                if name.len() == CLASS_NAME_MAX {
                    break ClassScan::Invalid;
                }
                p += 1;
                c = self.at(p);
                if c == COLON && self.at(p + 1) == CLOSE {
                    p += 2;
                    break Class::named(&name).map_or(ClassScan::Invalid, ClassScan::Class);
                }
                match char::from_u32(c).filter(|_| class_name_unit(c)) {
                    Some(letter) => name.push(letter),
                    None => break ClassScan::NotAName,
                }
            };
            match scan {
                ClassScan::Class(k) => {
                    tests[0] = Some((Set::Class(k), self.skip(p)));
                    return self.next(tests, p);
                }
                ClassScan::Invalid => return end(tests, Outcome::Fail),
                ClassScan::NotAName => {
                    p = start;
                    normal = Some(OPEN);
                }
            }
        } else if c == OPEN && self.at(p) == EQUALS {
            // `[=c=]`: without collation rules, just the unit c.
            let sym = self.at(p + 1);
            if sym != NUL && self.at(p + 2) == EQUALS && self.at(p + 3) == CLOSE {
                tests[0] = Some((Set::Unit(sym), self.skip(p + 4)));
                return self.next(tests, p + 4);
            }
            normal = Some(OPEN);
        } else if c == NUL {
            return end(tests, Outcome::Unterminated);
        } else if c == OPEN && self.at(p) == DOT {
            // `[.c.]`: without collation rules, one-unit names only.
            let Some(close) = self.collating_end(p) else {
                return end(tests, Outcome::Fail);
            };
            if close - p != 4 {
                return end(tests, Outcome::Fail);
            }
            let sym = self.at(p + 1);
            p = close;
            // glibc decides "range" more loosely here than for plain units
            // and then neither compares nor, before `]`, makes a range:
            // `[[.a.]-]` does not match `a`.
            let is_range = self.at(p) == DASH && self.at(p + 1) != NUL;
            if !is_range {
                tests[0] = Some((Set::Unit(sym), self.skip(p)));
            }
            range_from = Some(sym);
        } else {
            normal = Some(c);
        }
        if let Some(u) = normal {
            let is_range = self.at(p) == DASH && self.at(p + 1) != NUL && self.at(p + 1) != CLOSE;
            if !is_range {
                tests[0] = Some((Set::Unit(u), self.skip(p)));
            }
            range_from = Some(u);
        }
        if let Some(lo) = range_from {
            if self.at(p) == DASH && self.at(p + 1) != CLOSE {
                p += 1;
                let mut hi = self.at(p);
                p += 1;
                if hi == OPEN && self.at(p) == DOT {
                    let Some(close) = self.collating_end(p) else {
                        return end(tests, Outcome::Fail);
                    };
                    if close - p != 4 {
                        return end(tests, Outcome::Fail);
                    }
                    hi = self.at(p + 1);
                    p = close;
                } else {
                    if hi == BACKSLASH {
                        hi = self.at(p);
                        p += 1;
                    }
                    if hi == NUL {
                        return end(tests, Outcome::Fail);
                    }
                }
                tests[1] = Some((Set::Range(lo, hi), self.skip(p)));
            }
        }
        self.next(tests, p)
    }

    /// After a member, the scan reads the unit at `y`: a `]` closes the
    /// expression, anything else starts the next member.
    fn next(&self, tests: [Option<(Set, Outcome)>; 2], y: usize) -> Item {
        let then = if self.at(y) == CLOSE {
            Then::End(Outcome::Closed(y + 1))
        } else {
            Then::Item(y)
        };
        Item { tests, then }
    }

    /// glibc's `matched:` loop from position `start`, which skips the rest
    /// of a bracket expression after a member matched. It parses differently
    /// from the main scan. Memoised: the skip from a position ends where the
    /// skip from the next member ends.
    fn skip(&mut self, start: usize) -> Outcome {
        let mut visited = Vec::new();
        let mut p = start;
        let outcome = loop {
            if let Some(Some(known)) = self.skips.get(p) {
                break *known;
            }
            visited.push(p);
            let mut q = p + 1;
            match self.at(p) {
                CLOSE => break Outcome::Closed(q),
                NUL => break Outcome::Unterminated,
                BACKSLASH => {
                    if self.at(q) == NUL {
                        break Outcome::Fail;
                    }
                    q += 1;
                }
                OPEN if self.at(q) == COLON => {
                    // Skip `[:name:]`, or only the `[` when no name follows.
                    let colon = q;
                    let mut r = q;
                    let mut count = 0;
                    let end = loop {
                        r += 1;
                        count += 1;
                        if count == CLASS_NAME_MAX {
                            break None;
                        }
                        if self.at(r) == COLON && self.at(r + 1) == CLOSE {
                            break Some(r + 2);
                        }
                        if !class_name_unit(self.at(r)) {
                            break Some(colon);
                        }
                    };
                    match end {
                        Some(end) => q = end,
                        None => break Outcome::Fail,
                    }
                }
                OPEN if self.at(q) == EQUALS => {
                    if self.at(q + 1) == NUL || self.at(q + 2) != EQUALS || self.at(q + 3) != CLOSE
                    {
                        break Outcome::Fail;
                    }
                    q += 4;
                }
                OPEN if self.at(q) == DOT => match self.collating_end(q) {
                    Some(end) => q = end,
                    None => break Outcome::Fail,
                },
                _ => {}
            }
            p = q;
        };
        for v in visited {
            if let Some(slot) = self.skips.get_mut(v) {
                *slot = Some(outcome);
            }
        }
        outcome
    }
}

/// The character classes `wctype(3)` knows in glibc's `C.UTF-8`.
///
/// ASCII membership is exact. Beyond ASCII, glibc's tables are generated
/// from Unicode data by fixed rules (`localedata/unicode-gen`); these apply
/// the same rules to Rust's Unicode properties. Against glibc 2.36
/// (Unicode 14) on every assigned character they agree except where Unicode
/// itself changed since (44 characters: combining letters like U+0363 that
/// became Alphabetic, a few modifier letters that became Lowercase), for
/// `combining` (approximated by the combining-mark blocks, as Rust exposes no
/// general category), and in that unassigned code points count as printable
/// here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Alnum,
    Alpha,
    Blank,
    Cntrl,
    Digit,
    Graph,
    Lower,
    Print,
    Punct,
    Space,
    Upper,
    Xdigit,
    Combining,
}

impl Class {
    fn named(name: &str) -> Option<Class> {
        Some(match name {
            "alnum" => Class::Alnum,
            "alpha" => Class::Alpha,
            "blank" => Class::Blank,
            "cntrl" => Class::Cntrl,
            "digit" => Class::Digit,
            "graph" => Class::Graph,
            "lower" => Class::Lower,
            "print" => Class::Print,
            "punct" => Class::Punct,
            "space" => Class::Space,
            "upper" => Class::Upper,
            "xdigit" => Class::Xdigit,
            // glibc's i18n LC_CTYPE defines it, so `[[:combining:]]` is valid.
            "combining" => Class::Combining,
            _ => return None,
        })
    }

    fn contains(self, c: char) -> bool {
        match self {
            Class::Alnum => is_alpha(c) || c.is_ascii_digit(),
            Class::Alpha => is_alpha(c),
            Class::Blank => matches!(
                c,
                '\t' | ' '
                    | '\u{1680}'
                    | '\u{2000}'..='\u{2006}'
                    | '\u{2008}'..='\u{200a}'
                    | '\u{205f}'
                    | '\u{3000}'
            ),
            Class::Cntrl => is_cntrl(c),
            Class::Digit => c.is_ascii_digit(),
            Class::Graph => is_graph(c),
            Class::Lower => {
                // glibc: has an uppercase mapping, or the Lowercase property.
                if c.is_ascii() {
                    c.is_ascii_lowercase()
                } else {
                    c.is_lowercase() || maps_to_other(c.to_uppercase(), c)
                }
            }
            Class::Print => !is_cntrl(c),
            Class::Punct => is_graph(c) && !is_alpha(c) && !c.is_ascii_digit(),
            Class::Space => is_space(c),
            Class::Upper => {
                // glibc: has a lowercase mapping, or the Uppercase property.
                if c.is_ascii() {
                    c.is_ascii_uppercase()
                } else {
                    c.is_uppercase() || maps_to_other(c.to_lowercase(), c)
                }
            }
            Class::Xdigit => c.is_ascii_hexdigit(),
            Class::Combining => matches!(
                c,
                '\u{300}'..='\u{36f}'
                    | '\u{483}'..='\u{489}'
                    | '\u{1ab0}'..='\u{1aff}'
                    | '\u{1dc0}'..='\u{1dff}'
                    | '\u{20d0}'..='\u{20ff}'
                    | '\u{fe20}'..='\u{fe2f}'
            ),
        }
    }
}

/// glibc: the Alphabetic property, or a decimal digit other than `0`-`9`.
fn is_alpha(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    c.is_alphabetic()
        || DIGIT_BLOCKS
            .iter()
            .any(|&zero| (zero..zero + 10).contains(&u32::from(c)))
}

/// The zeros of Unicode 14's non-ASCII decimal digit runs (general category
/// `Nd`; each run is ten consecutive code points).
const DIGIT_BLOCKS: [u32; 65] = [
    0x660, 0x6f0, 0x7c0, 0x966, 0x9e6, 0xa66, 0xae6, 0xb66, 0xbe6, 0xc66, 0xce6, 0xd66, 0xde6,
    0xe50, 0xed0, 0xf20, 0x1040, 0x1090, 0x17e0, 0x1810, 0x1946, 0x19d0, 0x1a80, 0x1a90, 0x1b50,
    0x1bb0, 0x1c40, 0x1c50, 0xa620, 0xa8d0, 0xa900, 0xa9d0, 0xa9f0, 0xaa50, 0xabf0, 0xff10,
    0x104a0, 0x10d30, 0x11066, 0x110f0, 0x11136, 0x111d0, 0x112f0, 0x11450, 0x114d0, 0x11650,
    0x116c0, 0x11730, 0x118e0, 0x11950, 0x11c50, 0x11d50, 0x11da0, 0x16a60, 0x16ac0, 0x16b50,
    0x1d7ce, 0x1d7d8, 0x1d7e2, 0x1d7ec, 0x1d7f6, 0x1e140, 0x1e2f0, 0x1e950, 0x1fbf0,
];

/// Whether a case mapping is a single character other than `c` (glibc uses
/// the simple mappings; a full mapping to several characters has none).
fn maps_to_other(mut mapped: impl Iterator<Item = char>, c: char) -> bool {
    matches!((mapped.next(), mapped.next()), (Some(m), None) if m != c)
}

fn is_cntrl(c: char) -> bool {
    matches!(c, '\0'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}')
}

fn is_space(c: char) -> bool {
    matches!(
        c,
        '\t'..='\r'
            | ' '
            | '\u{1680}'
            | '\u{2000}'..='\u{2006}'
            | '\u{2008}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{205f}'
            | '\u{3000}'
    )
}

fn is_graph(c: char) -> bool {
    !is_cntrl(c) && !is_space(c)
}

#[cfg(test)]
mod tests {
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
}
