// expect: LimitExceeded recursion_depth
// backend: 0
const f = (n) => f(n + 1) + 1;
f(0)
