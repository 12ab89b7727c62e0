//! The base64 fallback's program: `_ss_fb_*` steps (`fallback.sh`),
//! every argument quoted.

use super::*;

/// One step of the base64 fallback, run as `_ss_fb_*` with every argument
/// quoted (see `fallback.sh`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FallbackStep<'a> {
    /// An empty 0600 temp `temp` in `parent`, for the target `target`.
    Create {
        /// The target the temp stands in for (confined too).
        target: &'a str,
        /// Its parent directory.
        parent: &'a str,
        /// The temp's name.
        temp: &'a str,
    },
    /// Appends `len` base64 bytes from stdin, decoded, to the temp.
    Append {
        /// The temp's directory.
        parent: &'a str,
        /// The temp's name.
        temp: &'a str,
        /// Bytes of base64 on stdin.
        len: usize,
    },
    /// Gives the temp `mode` and renames it onto `base`.
    Promote {
        /// The temp's directory.
        parent: &'a str,
        /// The temp's name.
        temp: &'a str,
        /// The target's name in `parent`.
        base: &'a str,
        /// The mode to apply first.
        mode: Option<u32>,
    },
    /// Removes the temp.
    Remove {
        /// The temp's directory.
        parent: &'a str,
        /// The temp's name.
        temp: &'a str,
    },
    /// Extracts the staged tar into this exec's scratch as `d`.
    Extract {
        /// The tar's directory.
        dir: &'a str,
        /// The tar's name.
        tar: &'a str,
    },
    /// Replaces the remote dir's contents with `d`, all or nothing.
    ReplaceRoot {
        /// The mode to apply first.
        mode: Option<u32>,
    },
    /// Replaces the directory `parent/base` with `d`.
    ReplaceDir {
        /// The target's parent.
        parent: &'a str,
        /// The target's name.
        base: &'a str,
        /// The mode to apply first.
        mode: Option<u32>,
    },
    /// Runs the `len`-byte command on stdin in `cwd`.
    Command {
        /// Its confined working directory.
        cwd: &'a str,
        /// Bytes of command on stdin.
        len: usize,
    },
    /// Archives the file `source` into the staged tar `name`.
    PackFile {
        /// The staged tar under the remote dir.
        name: &'a str,
        /// The sandbox file.
        source: &'a str,
    },
    /// Archives the directory `source` into the staged tar `name`.
    PackDir {
        /// The staged tar under the remote dir.
        name: &'a str,
        /// The sandbox directory.
        source: &'a str,
        /// Dereference symlinks (`tar -h`).
        follow: bool,
        /// Exclude patterns (the defaults are added).
        exclude: &'a [String],
    },
    /// Removes the staged tar `name`.
    Unstage {
        /// The staged tar under the remote dir.
        name: &'a str,
    },
    /// Prints chunk `index` (of `size` bytes) of the staged tar as base64.
    Chunk {
        /// The staged tar under the remote dir.
        name: &'a str,
        /// Chunk size.
        size: usize,
        /// Which chunk.
        index: u64,
    },
}

impl FallbackStep<'_> {
    /// The call, every argument quoted.
    fn line(&self) -> Result<String, Error> {
        let q = |s: &str| sh_quote(s);
        let m = |mode: &Option<u32>| sh_quote(&mode_arg(*mode));
        Ok(match self {
            Self::Create {
                target,
                parent,
                temp,
            } => {
                format!("_ss_fb_create {} {} {}", q(target)?, q(parent)?, q(temp)?)
            }
            Self::Append { parent, temp, len } => {
                format!("_ss_fb_append {} {} {len}", q(parent)?, q(temp)?)
            }
            Self::Promote {
                parent,
                temp,
                base,
                mode,
            } => format!(
                "_ss_fb_promote {} {} {} {}",
                q(parent)?,
                q(temp)?,
                q(base)?,
                m(mode)?
            ),
            Self::Remove { parent, temp } => format!("_ss_fb_remove {} {}", q(parent)?, q(temp)?),
            Self::Extract { dir, tar } => format!("_ss_fb_extract {} {}", q(dir)?, q(tar)?),
            Self::ReplaceRoot { mode } => format!("_ss_dir_root d {}", m(mode)?),
            Self::ReplaceDir { parent, base, mode } => {
                format!("_ss_dir d {} {} {}", q(parent)?, q(base)?, m(mode)?)
            }
            Self::Command { cwd, len } => format!("_ss_fb_cmd {} {len}", q(cwd)?),
            Self::PackFile { name, source } => {
                format!("_ss_fb_pack {} file {}", q(name)?, q(source)?)
            }
            Self::PackDir {
                name,
                source,
                follow,
                exclude,
            } => format!(
                "_ss_fb_pack {} dir {}",
                q(name)?,
                dir_args(source, *follow, exclude)?
            ),
            Self::Unstage { name } => format!("_ss_fb_unstage {}", q(name)?),
            Self::Chunk { name, size, index } => {
                format!("_ss_fb_chunk {} {size} {index}", q(name)?)
            }
        })
    }
}

/// A base64-fallback program: the whole library, then `steps` in order.
///
/// # Errors
/// When a path cannot be quoted (NUL) or the scratch name is bad.
pub fn fallback(
    root: &str,
    timeout_ms: u64,
    scratch: &str,
    steps: &[FallbackStep<'_>],
) -> Result<String, Error> {
    let mut s = preamble(root, timeout_ms, scratch)?;
    s.push_str(INBOUND);
    s.push_str(OUTBOUND);
    s.push_str(FALLBACK);
    for step in steps {
        s.push_str(&step.line()?);
        s.push('\n');
    }
    Ok(s)
}
