// expect: LimitExceeded memory_bytes
// backend: 0
// A URL of 24 million characters: the url crate parses it inside the
// guest, and every copy (the text, the parsed URL, its fields as
// JavaScript strings) counts against the script's own memory.
const u = new URL("https://pve1:8006/" + "a".repeat(24 * 1024 * 1024));
u.pathname.length
