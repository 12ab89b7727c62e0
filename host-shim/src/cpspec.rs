//! `kubectl cp` argument syntax: `[NAMESPACE/]POD:PATH` for a pod,
//! `local:PATH` for the local sandbox backend, `daytona:SANDBOX_ID:PATH`
//! for a Daytona sandbox, anything else a host path.

/// One side of a `cp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// A path on this host.
    Host(String),
    /// A path in a pod.
    Pod {
        /// Namespace, when given as `ns/pod:path`.
        namespace: Option<String>,
        /// Pod name.
        pod: String,
        /// Absolute path in the pod.
        path: String,
    },
    /// A path in the local sandbox (`local:PATH`, with `--sandbox-root`).
    Local(String),
    /// A path in a Daytona sandbox (`daytona:SANDBOX_ID:PATH`).
    Daytona {
        /// The sandbox id.
        sandbox: String,
        /// Absolute path in the sandbox.
        path: String,
    },
}

/// Why a spec was refused (exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !s.starts_with(['-', '.'])
        && !s.ends_with(['-', '.'])
}

/// Parses one side. Host paths that contain `:` must start with `/`, `.`
/// or `~` (as with `kubectl cp`).
///
/// # Errors
/// A pod side with a bad namespace/pod name, or a relative sandbox path.
pub fn parse(arg: &str) -> Result<Spec, SpecError> {
    if arg.is_empty() {
        return Err(SpecError("empty path".into()));
    }
    if arg.starts_with(['/', '.', '~']) {
        return Ok(Spec::Host(arg.to_owned()));
    }
    if let Some(rest) = arg.strip_prefix("daytona:") {
        let (sandbox, path) = rest.split_once(':').unwrap_or((rest, ""));
        let id_ok = !sandbox.is_empty()
            && sandbox
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !id_ok {
            return Err(SpecError(format!(
                "{arg:?}: {sandbox:?} is not a Daytona sandbox id"
            )));
        }
        if !path.starts_with('/') {
            return Err(SpecError(format!(
                "{arg:?}: the sandbox path must be absolute (e.g. daytona:{sandbox}:/workspace/file)"
            )));
        }
        return Ok(Spec::Daytona {
            sandbox: sandbox.to_owned(),
            path: path.to_owned(),
        });
    }
    let Some((who, path)) = arg.split_once(':') else {
        return Ok(Spec::Host(arg.to_owned()));
    };
    if !path.starts_with('/') {
        return Err(SpecError(format!(
            "{arg:?}: the sandbox path must be absolute (e.g. {who}:/workspace/file)"
        )));
    }
    if who == "local" {
        return Ok(Spec::Local(path.to_owned()));
    }
    let (namespace, pod) = match who.split_once('/') {
        Some((ns, pod)) => (Some(ns), pod),
        None => (None, who),
    };
    if let Some(ns) = namespace {
        if !dns_label(ns) || ns.contains('.') {
            return Err(SpecError(format!(
                "{arg:?}: {ns:?} is not a valid namespace"
            )));
        }
    }
    if !dns_label(pod) {
        return Err(SpecError(format!(
            "{arg:?}: {pod:?} is not a valid pod name"
        )));
    }
    Ok(Spec::Pod {
        namespace: namespace.map(str::to_owned),
        pod: pod.to_owned(),
        path: path.to_owned(),
    })
}

/// Which way a `cp` goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Copy {
    /// Host path -> sandbox.
    In {
        /// Host source.
        host: String,
        /// Sandbox side.
        sandbox: Spec,
    },
    /// Sandbox -> host path.
    Out {
        /// Sandbox side.
        sandbox: Spec,
        /// Host target.
        host: String,
    },
}

/// Parses `SRC DST`: exactly one side must be in a sandbox.
///
/// # Errors
/// Both sides on the host, both in sandboxes, or a bad spec.
pub fn parse_copy(src: &str, dst: &str) -> Result<Copy, SpecError> {
    match (parse(src)?, parse(dst)?) {
        (Spec::Host(h), s) if !matches!(s, Spec::Host(_)) => Ok(Copy::In { host: h, sandbox: s }),
        (s, Spec::Host(h)) if !matches!(s, Spec::Host(_)) => Ok(Copy::Out { sandbox: s, host: h }),
        (Spec::Host(_), Spec::Host(_)) => Err(SpecError(
            "both paths are on this host: one side must be POD:PATH, NAMESPACE/POD:PATH, local:PATH or daytona:SANDBOX_ID:PATH".into(),
        )),
        _ => Err(SpecError("both paths are in sandboxes: one side must be a host path".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_specs() {
        assert_eq!(
            parse("web-0:/workspace/a").unwrap(),
            Spec::Pod {
                namespace: None,
                pod: "web-0".into(),
                path: "/workspace/a".into()
            }
        );
        assert_eq!(
            parse("team-a/web-0:/w").unwrap(),
            Spec::Pod {
                namespace: Some("team-a".into()),
                pod: "web-0".into(),
                path: "/w".into()
            }
        );
        assert_eq!(parse("local:/w/x").unwrap(), Spec::Local("/w/x".into()));
        assert_eq!(
            parse("daytona:3f2a-b9:/home/daytona/ws").unwrap(),
            Spec::Daytona {
                sandbox: "3f2a-b9".into(),
                path: "/home/daytona/ws".into()
            }
        );
        assert_eq!(parse("/tmp/a:b").unwrap(), Spec::Host("/tmp/a:b".into()));
        assert_eq!(parse("./a:b").unwrap(), Spec::Host("./a:b".into()));
        assert_eq!(parse("dir/file").unwrap(), Spec::Host("dir/file".into()));
    }

    #[test]
    fn bad_specs() {
        for bad in [
            "pod:relative",
            "Pod:/x",
            "a/b/c:/x",
            "-x:/y",
            "ns./p:/x",
            "",
            "bad_name:/x",
            "daytona::/x",
            "daytona:a/b:/x",
            "daytona:id:rel",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn directions() {
        assert!(matches!(
            parse_copy("./ws", "p:/w").unwrap(),
            Copy::In { .. }
        ));
        assert!(matches!(
            parse_copy("p:/w", "/tmp/x").unwrap(),
            Copy::Out { .. }
        ));
        assert!(parse_copy("/a", "/b").is_err());
        assert!(parse_copy("p:/a", "q:/b").is_err());
    }
}
