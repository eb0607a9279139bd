// expect: LimitExceeded
// backend: 0
// Random bytes drawn as fast as the guest can ask: each draw is the
// host's (WASI random_get, at most 64 KiB at a time). A journaled
// execution keeps every byte, so journal_bytes ends it; otherwise the
// clock does, and the host pays no more than the draws it answered.
const bytes = new Uint8Array(65536);
for (;;) crypto.getRandomValues(bytes);
