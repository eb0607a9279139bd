// expect: LimitExceeded wall_time_ms
// backend: 0
for (;;) console.log()
