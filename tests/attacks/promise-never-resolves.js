// expect: RuntimeError
// backend: 0
await new Promise(() => {})
