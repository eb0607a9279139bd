// expect: RuntimeError
// backend: 0
require('fs').readFileSync('/etc/passwd')
