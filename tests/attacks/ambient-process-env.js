// expect: RuntimeError
// backend: 0
process.env.HOME
