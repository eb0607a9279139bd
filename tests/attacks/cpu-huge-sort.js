// expect: LimitExceeded
// backend: 0
const a = Array.from({length: 5e6}, (_, i) => (i * 7919) % 1000003);
a.sort((x, y) => x - y);
a.length
