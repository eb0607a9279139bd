const a = new Set([1, 2, 3]);
const b = new Set([2, 3, 4]);
[[...a].filter((x) => b.has(x)), new Set([...a, ...b]).size]
