//! Where this machine's state directory is, when the configuration does
//! not say.

use std::path::PathBuf;

/// No state directory can be chosen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no state directory for approvals and the audit log: set AIRLOCK_STATE_DIR or HOME (or state_dir in the configuration file); Airlock does not fall back to a shared directory such as /tmp, where another user could prepare it")]
pub struct NoStateDir;

/// `$AIRLOCK_STATE_DIR`, else `$XDG_STATE_HOME/airlock`, else
/// `~/.local/state/airlock`; with none of them set, an error rather than
/// a directory in `/tmp` that another user could create first.
pub fn default_state_dir() -> Result<PathBuf, NoStateDir> {
    state_dir_from(|name| std::env::var_os(name))
}

/// [`default_state_dir`] over any environment (tests).
pub fn state_dir_from(
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<PathBuf, NoStateDir> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = set("AIRLOCK_STATE_DIR") {
        return Ok(d);
    }
    if let Some(d) = set("XDG_STATE_HOME") {
        return Ok(d.join("airlock"));
    }
    if let Some(h) = set("HOME") {
        return Ok(h.join(".local/state/airlock"));
    }
    Err(NoStateDir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_directory_never_falls_back_to_tmp() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        assert_eq!(
            state_dir_from(env(&[("HOME", "/home/a"), ("AIRLOCK_STATE_DIR", "/s")])),
            Ok(PathBuf::from("/s"))
        );
        assert_eq!(
            state_dir_from(env(&[("HOME", "/home/a"), ("XDG_STATE_HOME", "/x")])),
            Ok(PathBuf::from("/x/airlock"))
        );
        assert_eq!(
            state_dir_from(env(&[("HOME", "/home/a"), ("XDG_STATE_HOME", "")])),
            Ok(PathBuf::from("/home/a/.local/state/airlock"))
        );
        let e = state_dir_from(env(&[("HOME", ""), ("TMPDIR", "/tmp")])).unwrap_err();
        assert!(
            e.to_string().contains("set AIRLOCK_STATE_DIR or HOME"),
            "{e}"
        );
    }
}
