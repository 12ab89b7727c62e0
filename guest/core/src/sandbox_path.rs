//! Lexical confinement of sandbox paths (layer one of three).
//!
//! Before any exec, every sandbox path in a request must be absolute, free of
//! NUL and `..`, and equal to or beneath the remote dir. The sandbox re-checks
//! with `realpath` and `/proc/self/fd` pins (layer two, see [`crate::script`]);
//! the host writes only through capability handles (layer three).

use crate::{Error, SCRATCH_PREFIX};

/// Normalizes the remote dir: absolute, no `..`, no NUL, not `/` itself.
///
/// # Errors
/// [`crate::ErrorKind::InvalidRequest`] for a relative, traversing or root
/// path, or one with control characters.
pub fn normalize_remote_dir(dir: &str) -> Result<String, Error> {
    refuse_control("remote dir", dir)?;
    let norm = normalize_absolute(dir).ok_or_else(|| {
        Error::invalid(format!("remote dir {dir:?} is not a clean absolute path"))
    })?;
    if norm == "/" {
        return Err(Error::invalid(
            "remote dir must not be / (nothing would confine the sync)",
        ));
    }
    Ok(norm)
}

/// Confines `path` under `root` (already normalized), returning it normalized.
///
/// `label` names the path in the error ("target", "source", "post-upload cwd").
/// Names starting with the reserved scratch prefix are refused so a provider
/// temp can never collide with a real target.
///
/// # Errors
/// [`crate::ErrorKind::InvalidRequest`] when the path holds a control
/// character; [`crate::ErrorKind::Confinement`] when it is relative, contains
/// `..`, lies outside `root`, or uses a reserved scratch name.
pub fn confine(root: &str, path: &str, label: &str) -> Result<String, Error> {
    refuse_control(label, path)?;
    let norm = normalize_absolute(path).ok_or_else(|| {
        Error::confinement(format!("{label} {path:?} is not a confined absolute path"))
    })?;
    let inside = norm == root
        || (norm.len() > root.len()
            && norm.starts_with(root)
            && norm.as_bytes()[root.len()] == b'/');
    if !inside {
        return Err(Error::confinement(format!(
            "{label} {path} escapes the remote dir {root}"
        )));
    }
    if norm[root.len()..]
        .split('/')
        .any(|c| c.starts_with(SCRATCH_PREFIX))
    {
        return Err(Error::confinement(format!(
            "{label} {path} uses the reserved scratch name {SCRATCH_PREFIX}*"
        )));
    }
    Ok(norm)
}

/// Refuses control characters (C0, DEL, C1) in a sandbox path.
///
/// A shell's `$(...)` strips trailing newlines and a listing splits on
/// them, so a name holding one could reach a different path than the one
/// validated; no real workspace path needs them.
///
/// # Errors
/// [`crate::ErrorKind::InvalidRequest`] naming the first such character.
pub fn refuse_control(label: &str, path: &str) -> Result<(), Error> {
    match path.chars().find(|c| c.is_control()) {
        None => Ok(()),
        Some(c) => Err(Error::invalid(format!(
            "{label} {path:?} contains the control character {:?}",
            c
        ))),
    }
}

/// Splits a normalized absolute path into its parent and final component.
pub fn split_parent(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (".", path),
    }
}

/// Lexically normalizes an absolute POSIX path: collapses `//` and `.`,
/// strips a trailing `/`. Returns `None` for relative paths, `..` or NUL.
fn normalize_absolute(path: &str) -> Option<String> {
    if !path.starts_with('/') || path.contains('\0') {
        return None;
    }
    let mut out = String::with_capacity(path.len());
    for comp in path.split('/') {
        match comp {
            "" | "." => {}
            ".." => return None,
            c => {
                out.push('/');
                out.push_str(c);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Some(out)
}

/// Validates a relative, `/`-separated path used inside a granted directory
/// or an archive: non-empty components, no `.`/`..`, no NUL.
pub fn is_clean_relative(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_escapes_and_relative() {
        let root = normalize_remote_dir("/workspace").unwrap();
        for bad in [
            "/workspace/../etc/passwd",
            "/etc/passwd",
            "relative/path",
            "/workspacex/a",
        ] {
            let err = confine(&root, bad, "target").unwrap_err();
            assert_eq!(err.kind, crate::ErrorKind::Confinement, "{bad}");
            assert!(
                err.message.contains("escapes") || err.message.contains("not a confined"),
                "{err}"
            );
        }
    }

    #[test]
    fn accepts_inside_and_root() {
        let root = normalize_remote_dir("/workspace/").unwrap();
        assert_eq!(root, "/workspace");
        assert_eq!(
            confine(&root, "/workspace/a/b.txt", "target").unwrap(),
            "/workspace/a/b.txt"
        );
        assert_eq!(
            confine(&root, "/workspace", "target").unwrap(),
            "/workspace"
        );
        assert_eq!(
            confine(&root, "/workspace//a/./b/", "target").unwrap(),
            "/workspace/a/b"
        );
    }

    #[test]
    fn refuses_reserved_scratch_names() {
        let root = "/w";
        assert!(confine(root, "/w/.paperclip-upload-x/f", "target").is_err());
        assert!(confine(root, "/w/a/.paperclip-upload", "target").is_err());
        assert!(confine(root, "/w/a/paperclip-upload", "target").is_ok());
    }

    #[test]
    fn remote_dir_rules() {
        assert!(normalize_remote_dir("/").is_err());
        assert!(normalize_remote_dir("//").is_err());
        assert!(normalize_remote_dir("w").is_err());
        assert!(normalize_remote_dir("/a/../b").is_err());
    }

    #[test]
    fn control_characters_are_invalid_requests() {
        for bad in [
            "/w/a\n",
            "/w/a\nb",
            "/w/\t",
            "/w/\u{7f}",
            "/w/\u{85}",
            "/w/\r",
        ] {
            let err = confine("/w", bad, "target").unwrap_err();
            assert_eq!(err.kind, crate::ErrorKind::InvalidRequest, "{bad:?}");
            let err = normalize_remote_dir(bad).unwrap_err();
            assert_eq!(err.kind, crate::ErrorKind::InvalidRequest, "{bad:?}");
        }
        // NUL is a control character too.
        assert_eq!(
            confine("/w", "/w/a\0", "target").unwrap_err().kind,
            crate::ErrorKind::InvalidRequest
        );
        assert!(confine("/w", "/w/é ü-x", "target").is_ok());
    }

    #[test]
    fn parent_split() {
        assert_eq!(split_parent("/w/a/b"), ("/w/a", "b"));
        assert_eq!(split_parent("/w"), ("/", "w"));
    }

    #[test]
    fn clean_relative() {
        assert!(is_clean_relative("a/b"));
        for bad in ["", "/a", "a//b", "a/./b", "../a", "a/..", "a/"] {
            assert!(!is_clean_relative(bad), "{bad:?}");
        }
    }
}
