//! Text from a script, a client or a backend shown to a person: every
//! character that a terminal or a text renderer would act on instead of
//! show — C0 and C1 controls, DEL, and the invisible formatting and bidi
//! characters that reorder or hide what follows — is written as visible
//! `\u{…}` text, so what the reader sees is what the bytes say.
//!
//! Escaping is idempotent on its own output (a backslash is left alone),
//! so text that was already made visible can pass through again.

/// Whether `c` must be shown as `\u{…}` rather than as itself.
pub fn must_escape(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'          // C0 controls, incl. ESC, CR, LF, TAB
        | '\u{7f}'..='\u{9f}'       // DEL and C1 controls (CSI is U+9B)
        | '\u{ad}'                  // soft hyphen
        | '\u{61c}'                 // Arabic letter mark
        | '\u{180e}'                // Mongolian vowel separator
        | '\u{200b}'..='\u{200f}'   // zero-width space/joiners, LRM, RLM
        | '\u{2028}'..='\u{2029}'   // line and paragraph separators
        | '\u{202a}'..='\u{202e}'   // bidi embeddings and overrides
        | '\u{2060}'..='\u{2064}'   // word joiner, invisible operators
        | '\u{2066}'..='\u{206f}'   // bidi isolates, deprecated format chars
        | '\u{feff}'                // zero-width no-break space (BOM)
        | '\u{fff9}'..='\u{fffb}'   // interlinear annotation
        | '\u{e0000}'..='\u{e007f}' // tag characters (invisible ASCII)
    )
}

/// Appends `s` to `out` with every [`must_escape`] character as `\u{hex}`.
pub fn push_visible(out: &mut String, s: &str) {
    for c in s.chars() {
        if must_escape(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
}

/// `s` with every [`must_escape`] character as `\u{hex}`.
pub fn visible(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_visible(&mut out, s);
    out
}

/// How a name, key or id a person did not choose is quoted in a message:
/// made visible, at most `max_chars` characters of it, and its length in
/// bytes when it was cut, so a megabyte of it is never echoed.
pub fn quote(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        None => visible(s),
        Some((cut, _)) => format!("{}… ({} bytes)", visible(&s[..cut]), s.len()),
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a
/// character boundary.
pub fn cut_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_bidi_and_format_characters_become_visible() {
        let shown = visible("ok\u{1b}[2K\u{202e}evil\u{9b}31m\u{200b}\u{feff}\u{7f}\n\u{e0041}é");
        assert_eq!(
            shown,
            "ok\\u{1b}[2K\\u{202e}evil\\u{9b}31m\\u{200b}\\u{feff}\\u{7f}\\u{a}\\u{e0041}é"
        );
        assert!(shown.chars().all(|c| !must_escape(c)));
        assert_eq!(visible(&shown), shown, "idempotent");
    }

    #[test]
    fn quotes_are_cut_with_their_length() {
        assert_eq!(quote("vm_list", 64), "vm_list");
        let long = "x".repeat(2_000_000);
        let q = quote(&long, 64);
        assert_eq!(q, format!("{}… (2000000 bytes)", "x".repeat(64)));
        assert_eq!(cut_bytes("aé", 2), "a");
        assert_eq!(cut_bytes("aé", 3), "aé");
    }
}
