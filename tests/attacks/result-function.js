// expect: RuntimeError
// backend: 0
({ f: () => 1 })
