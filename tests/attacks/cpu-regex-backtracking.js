// expect: LimitExceeded wall_time_ms
// backend: 0
/^(a+)+$/.test('a'.repeat(40) + 'b')
