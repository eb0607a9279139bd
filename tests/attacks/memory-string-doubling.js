// expect: LimitExceeded memory_bytes
// backend: 0
let s = 'x';
while (true) s = s + s;
