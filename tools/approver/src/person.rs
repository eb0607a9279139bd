//! One notion of "the same person" for every four-eyes check: a call's
//! or a plan's approval, a runbook version's approval against its
//! author, a runbook's change against the person who approved its
//! version, the console's buttons, and what `audit verify` flags.
//!
//! Names reach Airlock as free text in places (`--by` on the command
//! line, a runbook's author), so comparing them byte for byte let
//! `--by Olga` approve what `olga` asked. Every check compares
//! [`canonical`] forms instead: compatibility-normalised (NFKC: a
//! full-width `ｏｌｇａ` is `olga`), lower-cased, with the characters
//! that show nothing (zero-width spaces and joiners, soft hyphens,
//! direction marks) and the spaces around the name removed. Two names
//! with one canonical form are one person ([`same`]).
//!
//! Letters of another script that look alike (a Cyrillic `о` in `olga`)
//! stay apart here; the command line refuses a `--by` that names no
//! identity the deployment knows, which closes that door where names
//! are typed.

use unicode_normalization::UnicodeNormalization;

/// The form names are compared in (see the module's documentation).
pub fn canonical(name: &str) -> String {
    let lowered: String = name
        .nfkc()
        .filter(|c| !shows_nothing(*c))
        .flat_map(char::to_lowercase)
        .collect();
    // Where lower case is not yet one form (Unicode's full case
    // folding): ß is ss, a final ς is σ, and İ lowers to i with a dot
    // above, which is i.
    let mut folded = String::with_capacity(lowered.len());
    for c in lowered.chars() {
        match c {
            'ß' | 'ẞ' => folded.push_str("ss"),
            'ς' => folded.push('σ'),
            '\u{307}' if folded.ends_with('i') => {}
            other => folded.push(other),
        }
    }
    // Lower-casing can leave a sequence NFKC would compose again.
    folded.trim().nfkc().collect()
}

/// Whether two names are one person's.
pub fn same(a: &str, b: &str) -> bool {
    a == b || canonical(a) == canonical(b)
}

/// Whether two names are one person's although written differently: what
/// an exact comparison let through before names were compared
/// canonically, and what `audit verify` flags.
pub fn disguised(a: &str, b: &str) -> bool {
    a != b && canonical(a) == canonical(b)
}

/// Unicode's default-ignorable code points: characters a terminal or a
/// web page draws as nothing.
fn shows_nothing(c: char) -> bool {
    matches!(
        c as u32,
        0x00AD
            | 0x034F
            | 0x061C
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_name_are_one_person() {
        for other in [
            "Olga",
            "OLGA",
            " olga ",
            "ｏｌｇａ",
            "ol\u{200B}ga",
            "\u{202E}olga",
            "ol\u{00AD}ga",
        ] {
            assert!(same("olga", other), "{other:?}");
            assert!(disguised("olga", other), "{other:?}");
        }
        assert!(same("olga", "olga") && !disguised("olga", "olga"));
        // Non-ASCII letters fold as the language does.
        assert!(same("ÉMILE", "émile"));
        assert!(same("e\u{301}mile", "émile"), "composed and decomposed");
        assert!(same("strauß", "STRAUSS") && same("ΟΔΥΣΣΕΥΣ", "οδυσσευς"));
        assert!(same("İLKER", "ilker"));
    }

    #[test]
    fn different_people_stay_apart() {
        for (a, b) in [
            ("olga", "olgb"),
            ("olga", "olga2"),
            ("sso:olga", "olga"),
            ("olga", "\u{043E}lga"), // Cyrillic о: refused by the CLI instead
            ("", "olga"),
        ] {
            assert!(!same(a, b), "{a:?} {b:?}");
            assert!(!disguised(a, b), "{a:?} {b:?}");
        }
    }
}
