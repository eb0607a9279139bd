// expect: LimitExceeded
// backend: 0
const ps = [];
for (let i = 0; i < 200000; i++) ps.push(new Promise((r) => r(i)));
(await Promise.all(ps)).length
