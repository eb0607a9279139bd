//! Who `--by` may name on the command line (`approvals approve|deny`,
//! `runbook add|approve|retire`): a person the deployment knows, in the
//! spelling it knows them by.
//!
//! `--by` is free text, and four eyes compare it with the identity that
//! asked or wrote. So a name given with `--by` that is no identity at all
//! (a typo, a look-alike letter from another script) is refused with what
//! to do, and a name that is one spelling of a known identity (`Olga`) is
//! recorded as that identity: what the store, the audit chain and every
//! later check then see. Without `--by`, the login name stands
//! (`$SUDO_USER` under sudo, else `$USER`): set by sudo or the login, not
//! checked here, so no stronger than `--by`, which whoever may write the
//! state can give anyway; it too is recorded as the identity it spells,
//! if it spells one.
//!
//! Known are: the identities `[identities]` lists (the simulated
//! cluster's local, rita, olga and alice when it lists none), the console's
//! `approvers`, identities with a bearer key in the deployment's database,
//! and `PREFIX:VALUE` identities of a configured OpenID issuer (their
//! people cannot be listed in advance).

use airlock_approver::person;
use airlock_catalog::visible::visible;
use airlock_gateway::keys::{self, KeyStore};

use crate::settings::ConfigFile;

/// The names `--by` may take.
pub struct Known {
    names: Vec<String>,
    /// `PREFIX:` of each OpenID issuer (and the console's).
    prefixes: Vec<String>,
}

/// How many known names an error lists.
const LISTED: usize = 12;

/// Who decides without `--by` when the login name is unknown.
pub const DEFAULT_LOGIN: &str = "operator";

impl Known {
    /// Everyone `file` names, and the identities holding a key in `keys`.
    pub fn of(file: &ConfigFile, keys: Option<&dyn KeyStore>) -> Result<Self, String> {
        let mut names: Vec<String> = file.identities.keys().cloned().collect();
        if names.is_empty() && !file.configures_backend() {
            // The simulated cluster's people, as `demo::simulate` adds
            // them to a configuration that names none.
            names.extend(
                crate::demo::IDENTITIES
                    .iter()
                    .map(|(n, _, _)| n.to_string()),
            );
        }
        let mut prefixes = Vec::new();
        if let Some(console) = &file.console {
            names.extend(console.approvers.iter().cloned());
            if let Some(oidc) = &console.oidc {
                let p = oidc
                    .identity_prefix
                    .as_deref()
                    .unwrap_or(airlock_console::config::DEFAULT_IDENTITY_PREFIX);
                prefixes.push(format!("{p}:"));
            }
        }
        if let Some(oauth) = &file.oauth {
            let (_, issuers) = oauth.check().map_err(|e| e.to_string())?;
            prefixes.extend(issuers.into_iter().map(|i| i.identity_prefix));
        }
        if let Some(keys) = keys {
            let all = keys.all().map_err(|e| e.to_string())?;
            names.extend(all.into_iter().map(|(_, who)| who));
        }
        names.sort();
        names.dedup();
        Ok(Self { names, prefixes })
    }

    /// Who decides: `by` (`--by`) as the deployment spells it, refused
    /// with what to give instead when it names nobody it knows; without
    /// `--by`, the login name `login` (`$USER`), as the identity it spells
    /// if it spells one.
    pub fn resolve(&self, by: Option<&str>, login: Option<&str>) -> Result<String, String> {
        let Some(by) = by else {
            let login = login.filter(|l| !l.is_empty()).unwrap_or(DEFAULT_LOGIN);
            if let Some(name) = self.spelt(login) {
                return Ok(name.to_string());
            }
            // $USER is the environment's word, not the system's: a login
            // name that is nobody known is taken only in the characters
            // login names are made of, so it cannot pass for someone.
            let plain = login.len() <= 64 && keys::check_identity(login).is_ok();
            if !plain {
                return Err(format!(
                    "the login name `{}` ($USER) is no identity this deployment knows and not a plain login name: give --by with your identity as configured",
                    visible(login)
                ));
            }
            return Ok(login.to_string());
        };
        if let Some(name) = self.spelt(by) {
            return Ok(name.to_string());
        }
        // A provider's person as the provider writes them, in printable
        // ASCII only: a look-alike letter or an invisible blank could
        // otherwise pose as someone the provider names.
        let clean = !by.is_empty() && by.len() <= 256 && by.chars().all(|c| c.is_ascii_graphic());
        if clean && self.prefixes.iter().any(|p| by.starts_with(p.as_str())) {
            // The provider's people: written as the provider writes them.
            return Ok(by.to_string());
        }
        let shown: Vec<&str> = self.names.iter().take(LISTED).map(String::as_str).collect();
        let known = match (shown.len(), self.names.len() > LISTED) {
            (0, _) => "none is configured".to_string(),
            (_, false) => shown.join(", "),
            (_, true) => format!("{}, …", shown.join(", ")),
        };
        let providers = if self.prefixes.is_empty() {
            String::new()
        } else {
            format!(
                ", or an OpenID provider's person as {}NAME",
                self.prefixes.join("NAME, ")
            )
        };
        Err(format!(
            "--by `{}` names no identity this deployment knows: give your own identity as configured ({known}){providers}, add the person to the configuration as [identities.NAME] (mode ro, the default, grants nothing an unlisted identity lacks) or to [console] approvers, or leave --by out to decide as your login name",
            visible(by)
        ))
    }

    /// [`Known::resolve`] with this process's login name: the person who
    /// ran `sudo -u airlock airlock approvals approve` (`SUDO_USER`), not
    /// the service account sudo made them, else `USER`.
    pub fn decider(&self, by: Option<&str>) -> Result<String, String> {
        let var = |name| std::env::var(name).ok().filter(|v| !v.is_empty());
        self.resolve(by, var("SUDO_USER").or_else(|| var("USER")).as_deref())
    }

    /// The known identity `name` is a spelling of, if it is one (one
    /// person in any spelling: `person::same`).
    fn spelt(&self, name: &str) -> Option<&str> {
        if let Some(exact) = self.names.iter().find(|n| n.as_str() == name) {
            return Some(exact);
        }
        let mut matches = self.names.iter().filter(|n| person::same(n, name));
        match (matches.next(), matches.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(names: &[&str], prefixes: &[&str]) -> Known {
        Known {
            names: names.iter().map(|s| s.to_string()).collect(),
            prefixes: prefixes.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_spelling_of_a_known_identity_is_that_identity() {
        let k = known(&["alice", "olga"], &[]);
        for by in ["olga", "Olga", "ＯＬＧＡ", "ol\u{200B}ga"] {
            assert_eq!(k.resolve(Some(by), Some("root")).unwrap(), "olga", "{by:?}");
            // The login name too.
            assert_eq!(k.resolve(None, Some(by)).unwrap(), "olga", "{by:?}");
        }
    }

    #[test]
    fn an_unknown_name_is_refused_with_what_to_do() {
        let k = known(&["alice", "olga"], &["sso:"]);
        for bad in [
            "bob",
            "\u{043E}lga",
            "root",
            "",
            "sso",
            "sso:a b",
            "sso:\u{43E}lga",
            "sso:olga\u{2800}",
        ] {
            let e = k.resolve(Some(bad), Some("root")).unwrap_err();
            assert!(e.contains("--by") && e.contains("alice, olga"), "{e}");
            assert!(
                e.contains("[identities.NAME]") && e.contains("sso:NAME"),
                "{e}"
            );
            assert!(e.contains("leave --by out"), "{e}");
        }
        assert_eq!(k.resolve(Some("sso:Bob"), None).unwrap(), "sso:Bob");
        let none = known(&[], &[]).resolve(Some("x"), None).unwrap_err();
        assert!(none.contains("none is configured"), "{none}");
    }

    #[test]
    fn without_by_an_unknown_login_name_stands() {
        let k = known(&["alice", "olga"], &[]);
        assert_eq!(k.resolve(None, Some("root")).unwrap(), "root");
        assert_eq!(k.resolve(None, None).unwrap(), DEFAULT_LOGIN);
        assert_eq!(k.resolve(None, Some("")).unwrap(), DEFAULT_LOGIN);
        for odd in ["\u{43E}lga", "root\u{202E}", "a b"] {
            let e = k.resolve(None, Some(odd)).unwrap_err();
            assert!(e.contains("give --by"), "{e}");
        }
    }
}
