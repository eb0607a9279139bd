// expect: LimitExceeded wall_time_ms
// backend: 0
const line = 'x'.repeat(1 << 20);
for (;;) console.log(line)
