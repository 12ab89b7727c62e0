//! Exit codes of the sandbox programs (40-48 as in the seeds, the rest
//! ours), defined once: the preamble hands each to the shell as
//! `_ss_E_<NAME>`, and [`classify`] says what each means to the host.

use crate::ErrorKind;

/// Neither `realpath` nor `readlink -f` exists.
pub const NO_CANONICALIZER: i32 = 40;
/// The remote dir cannot be resolved or is not a directory.
pub const ROOT: i32 = 41;
/// A path resolves outside the remote dir.
pub const ESCAPE: i32 = 42;
/// Extracting, archiving or copying failed.
pub const EXTRACT: i32 = 43;
/// A rename onto a target failed.
pub const RENAME: i32 = 44;
/// An outbound source was replaced or is not a regular file.
pub const NOTREG: i32 = 45;
/// A directory could not be created, opened or entered.
pub const MKDIR: i32 = 46;
/// A pinning open failed.
pub const OPEN: i32 = 47;
/// `chmod` failed.
pub const CHMOD: i32 = 48;
/// The archive's commit marker is missing: a source changed or the stream was cut.
pub const INCOMPLETE: i32 = 50;
/// A post-upload command exited non-zero.
pub const COMMAND: i32 = 51;
/// A post-upload command ran past its timeout.
pub const COMMAND_TIMEOUT: i32 = 52;
/// An outbound source does not exist.
pub const MISSING: i32 = 53;
/// The program reached its own deadline and stopped.
pub const DEADLINE: i32 = 54;
/// The sandbox has no decompressor for the codec the host already used
/// (a toolbox upload is compressed before the sandbox is asked).
pub const NO_CODEC: i32 = 55;
/// The bootstrap could not read the script.
pub const BOOTSTRAP: i32 = 70;
/// The shell's "command not found".
pub const NOT_FOUND: i32 = 127;
/// 128 + SIGKILL: how a wrapper (`unshare --fork`, a container runtime)
/// reports a program killed by a signal, whose traps never ran.
pub const KILLED: i32 = 137;

/// Every code the programs use, by the name the shell knows it by.
pub const ALL: &[(&str, i32)] = &[
    ("NO_CANONICALIZER", NO_CANONICALIZER),
    ("ROOT", ROOT),
    ("ESCAPE", ESCAPE),
    ("EXTRACT", EXTRACT),
    ("RENAME", RENAME),
    ("NOTREG", NOTREG),
    ("MKDIR", MKDIR),
    ("OPEN", OPEN),
    ("CHMOD", CHMOD),
    ("INCOMPLETE", INCOMPLETE),
    ("COMMAND", COMMAND),
    ("COMMAND_TIMEOUT", COMMAND_TIMEOUT),
    ("MISSING", MISSING),
    ("DEADLINE", DEADLINE),
    ("NO_CODEC", NO_CODEC),
    ("BOOTSTRAP", BOOTSTRAP),
    ("NOT_FOUND", NOT_FOUND),
];

/// What a program's exit code means: the error kind it stands for and a
/// description for people. `None` for success.
pub fn classify(code: i32) -> Option<(ErrorKind, &'static str)> {
    let meaning = match code {
        0 => return None,
        ESCAPE => (ErrorKind::Confinement, "ESCAPE"),
        NOTREG | MISSING => (ErrorKind::InvalidRequest, "source is not a regular file"),
        INCOMPLETE => (ErrorKind::SourceChanged, "the archive did not arrive whole"),
        NO_CODEC => (
            ErrorKind::Transport,
            "the sandbox has no decompressor for the upload's codec",
        ),
        BOOTSTRAP => (
            ErrorKind::Transport,
            "the sandbox could not read the sync script",
        ),
        DEADLINE => (
            ErrorKind::LimitExceeded,
            "the sandbox exec ran past its timeout",
        ),
        NO_CANONICALIZER => (
            ErrorKind::CommandFailed,
            "the sandbox has neither realpath nor readlink -f",
        ),
        ROOT => (
            ErrorKind::CommandFailed,
            "the remote dir does not exist in the sandbox",
        ),
        EXTRACT => (ErrorKind::CommandFailed, "extracting or archiving failed"),
        RENAME => (ErrorKind::CommandFailed, "a rename onto a target failed"),
        MKDIR => (
            ErrorKind::CommandFailed,
            "creating or opening a directory failed",
        ),
        OPEN => (ErrorKind::CommandFailed, "opening a directory failed"),
        CHMOD => (ErrorKind::CommandFailed, "chmod failed"),
        NOT_FOUND => (
            ErrorKind::CommandFailed,
            "a required command is missing in the sandbox",
        ),
        _ => (ErrorKind::CommandFailed, "the sync script failed"),
    };
    Some(meaning)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_one_name_and_a_meaning() {
        for (i, (name, code)) in ALL.iter().enumerate() {
            assert!(ALL[i + 1..].iter().all(|(n, c)| n != name && c != code));
            assert!(classify(*code).is_some(), "{name}");
        }
        assert_eq!(classify(0), None);
        assert_eq!(classify(ESCAPE).map(|m| m.0), Some(ErrorKind::Confinement));
        assert_eq!(classify(99).map(|m| m.0), Some(ErrorKind::CommandFailed));
    }
}
