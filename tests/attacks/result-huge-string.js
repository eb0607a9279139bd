// expect: LimitExceeded memory_bytes
// backend: 0
'x'.repeat(10 << 20)
