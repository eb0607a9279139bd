// expect: LimitExceeded wall_time_ms
// backend: 0
function* g() { while (true) yield 1; }
for (const x of g()) {}
