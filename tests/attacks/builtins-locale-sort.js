// expect: LimitExceeded wall_time_ms
// backend: 0
// A sort by localeCompare of 300,000 names: each comparison runs in the
// guest (Rust, normalising both strings), so the script's clock ends it.
const names = Array.from({ length: 300000 }, (_, i) => `vm-${(i * 7919) % 300000}-é`);
names.sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
names.length
