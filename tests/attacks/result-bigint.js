// expect: RuntimeError
// backend: 0
10n ** 100n
