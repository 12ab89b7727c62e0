//! glibc 2.36's `fnmatch(3)` with `FNM_LEADING_DIR`, in a UTF-8 locale,
//! as gnulib's `exclude` module calls it for GNU tar (see [`super`]): the
//! engine behind every exclude pattern that has a wildcard.
//!
//! As glibc's, `*` and `?` match `/` too, there is no special leading-dot rule and no case folding, backslash
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
pub(super) enum Mode {
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
pub(super) struct Glob {
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
    pub(super) fn new(pat: &[u32], mode: Mode) -> Glob {
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
    pub(super) fn matches(&self, name: &[u32]) -> bool {
        self.run(name, true)
    }

    /// Runs the automaton over `name`, starting at 0 and, when `unanchored`,
    /// also after every `/` not followed by `/`. True when the whole pattern
    /// matched up to the end of the name or up to a `/` (FNM_LEADING_DIR).
    pub(super) fn run(&self, name: &[u32], unanchored: bool) -> bool {
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
/// (patterns never contain NUL: [`super::Excluder::new`] refuses it).
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
