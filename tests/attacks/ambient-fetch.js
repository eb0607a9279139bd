// expect: RuntimeError
// backend: 0
await fetch('http://169.254.169.254/')
