// expect: LimitExceeded
// backend: 0
const o = {};
for (let i = 0; ; i++) o['k' + i] = i;
