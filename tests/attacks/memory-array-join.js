// expect: LimitExceeded
// backend: 0
new Array(1e9).join('x').length
