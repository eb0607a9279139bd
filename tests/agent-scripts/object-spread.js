const base = { node: "pve1", full: 0 };
const merged = { ...base, full: 1, extra: true };
[merged.full, Object.keys(merged).length]
