//! Task ids come back from the cluster and from scripts (`wait_task`). Any
//! string either is refused or is a task id that prints back to itself
//! (numbers in canonical hex aside) and parses again to the same value.
#![no_main]

use airlock_proxmox::upid::Upid;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match text.parse::<Upid>() {
        Ok(upid) => {
            let printed = upid.to_string();
            assert_eq!(printed.parse::<Upid>().as_ref(), Ok(&upid), "{printed}");
            assert!(!printed.contains('/') && !printed.chars().any(char::is_control));
        }
        Err(e) => assert!(e.to_string().len() < 1_000, "the error echoes too much"),
    }
});
