//! Who `--by` may name on the command line (`approvals approve|deny`,
//! `runbook add|approve|retire`): a person the deployment knows, in the
//! spelling it knows them by.
//!
//! `--by` is free text (default: the login name), and four eyes compare
//! it with the identity that asked or wrote. So a name that is no
//! identity at all (a typo, `Olga` for `olga`, a look-alike letter from
//! another script) is refused with what to do, and a name that is one
//! spelling of a known identity is recorded as that identity: what the
//! store, the audit chain and every later check then see.
//!
//! Known are: the identities `[identities]` lists, the console's
//! `approvers`, identities with a bearer key in the deployment's database,
//! and `PREFIX:VALUE` identities of a configured OpenID issuer (their
//! people cannot be listed in advance).

use airlock_gateway::{keys::KeyStore, person, visible::visible};

use crate::settings::ConfigFile;

/// The names `--by` may take.
pub struct Known {
    names: Vec<String>,
    /// `PREFIX:` of each OpenID issuer (and the console's).
    prefixes: Vec<String>,
}

/// How many known names an error lists.
const LISTED: usize = 12;

impl Known {
    /// Everyone `file` names, and the identities holding a key in `keys`.
    pub fn of(file: &ConfigFile, keys: Option<&dyn KeyStore>) -> Result<Self, String> {
        let mut names: Vec<String> = file.identities.keys().cloned().collect();
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

    /// The identity `by` names, as the deployment spells it; an error
    /// that says what to give instead when it names none.
    pub fn resolve(&self, by: &str) -> Result<String, String> {
        if let Some(name) = self.names.iter().find(|n| n.as_str() == by) {
            return Ok(name.clone());
        }
        let mut matches = self.names.iter().filter(|n| person::same(n, by));
        if let (Some(name), None) = (matches.next(), matches.next()) {
            return Ok(name.clone());
        }
        let clean = !by.is_empty()
            && by.len() <= 256
            && by.chars().all(|c| !c.is_control() && !c.is_whitespace());
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
            "--by `{}` names no identity this deployment knows (--by defaults to the login name): give your own identity as configured ({known}){providers}, or add the person to the configuration as [identities.NAME] (mode ro, the default, grants nothing an unlisted identity lacks) or to [console] approvers",
            visible(by)
        ))
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
        assert_eq!(k.resolve("olga").unwrap(), "olga");
        assert_eq!(k.resolve("Olga").unwrap(), "olga");
        assert_eq!(k.resolve("ＯＬＧＡ").unwrap(), "olga");
        assert_eq!(k.resolve("ol\u{200B}ga").unwrap(), "olga");
    }

    #[test]
    fn an_unknown_name_is_refused_with_what_to_do() {
        let k = known(&["alice", "olga"], &["sso:"]);
        for bad in ["bob", "\u{043E}lga", "root", "", "sso", "sso:a b"] {
            let e = k.resolve(bad).unwrap_err();
            assert!(e.contains("--by") && e.contains("alice, olga"), "{e}");
            assert!(e.contains("[identities.NAME]") && e.contains("sso:NAME"), "{e}");
        }
        assert_eq!(k.resolve("sso:Bob").unwrap(), "sso:Bob");
        let none = known(&[], &[]).resolve("x").unwrap_err();
        assert!(none.contains("none is configured"), "{none}");
    }
}
