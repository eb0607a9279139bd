// expect: LimitExceeded memory_bytes
// backend: 0
const a = [];
while (true) a.push({pad: 'x'.repeat(1000)});
