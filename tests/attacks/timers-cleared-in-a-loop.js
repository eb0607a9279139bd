// expect: LimitExceeded wall_time_ms
// backend: 0
for (;;) clearTimeout(setTimeout(() => {}, 1e9))
