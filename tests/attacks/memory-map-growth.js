// expect: LimitExceeded
// backend: 0
const m = new Map();
for (let i = 0; ; i++) m.set(i, 'x'.repeat(100));
