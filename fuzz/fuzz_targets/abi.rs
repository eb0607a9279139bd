//! What the guest hands the host: a completion record, a log level, a tool
//! call's name and arguments, and the outcome passed to `finish`. None of
//! it may panic the host, and every guest-written text the host keeps is
//! capped.
#![no_main]

use airlock_guest_sdk::{
    abi::{Completion, LogLevel, COMPLETION_SIZE, FINISH_ERROR, FINISH_OK, FINISH_TRUNCATED},
    wire::{self, Finished, GuestError, MESSAGE_CHARS},
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// A capped text is at most MESSAGE_CHARS plus "… (N more characters)".
fn assert_capped(s: &str) {
    let n = s.chars().count();
    assert!(
        n <= MESSAGE_CHARS + 40,
        "a guest text of {n} characters was kept"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };

    if let Some(bytes) = rest.first_chunk::<COMPLETION_SIZE>() {
        assert_eq!(&Completion::decode(bytes).encode(), bytes);
    }
    if let Some(word) = rest.first_chunk::<4>() {
        let v = u32::from_le_bytes(*word);
        match LogLevel::from_u32(v) {
            Some(level) => assert_eq!(level as u32, v),
            None => assert!(v > 3),
        }
    }

    assert!(wire::json_tokens(rest) <= rest.len() as u64 + 1);

    let cut = usize::from(selector).min(rest.len());
    let (name, args) = rest.split_at(cut);
    if let Ok((n, v)) = wire::call(name.to_vec(), args) {
        assert_eq!(n.as_bytes(), name);
        assert_eq!(serde_json::from_slice::<Value>(args).ok(), Some(v));
    }

    let status = match selector % 5 {
        0 => FINISH_OK,
        1 | 2 => FINISH_ERROR,
        3 => FINISH_TRUNCATED,
        _ => u32::from(selector),
    };
    match wire::finish(status, rest) {
        Ok(Finished::Value(v)) => {
            assert_eq!(status, FINISH_OK);
            assert_eq!(serde_json::from_slice::<Value>(rest).ok(), Some(v));
        }
        Ok(Finished::Truncated { value, .. }) => {
            assert_eq!(status, FINISH_TRUNCATED);
            let wrapper = serde_json::from_slice::<Value>(rest).ok();
            assert_eq!(wrapper.and_then(|w| w.get("value").cloned()), Some(value));
        }
        Ok(Finished::Error(e)) => {
            assert_eq!(status, FINISH_ERROR);
            match e {
                GuestError::Syntax { message, .. } => assert_capped(&message),
                GuestError::Runtime { message, stack } => {
                    assert_capped(&message);
                    assert_capped(stack.as_deref().unwrap_or_default());
                }
                GuestError::EngineLimit { limit, .. } => assert_capped(&limit),
                GuestError::Tool {
                    tool,
                    code,
                    message,
                    ..
                } => {
                    assert_capped(&tool);
                    assert_capped(&code);
                    assert_capped(&message);
                }
                GuestError::Unknown(text) => assert_capped(&text),
            }
        }
        Err(_) => {}
    }
});
