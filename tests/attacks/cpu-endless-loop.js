// expect: LimitExceeded wall_time_ms
// backend: 0
while (true) {}
