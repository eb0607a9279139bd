// expect: LimitExceeded
// backend: 0
/^(a|aa)+$/.test('a'.repeat(60) + 'b')
