// expect: LimitExceeded memory_bytes
// backend: 0
'x'.repeat(2 ** 30).length
