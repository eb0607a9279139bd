// expect: LimitExceeded timers
// backend: 0
for (;;) setTimeout(() => {}, 1e9)
