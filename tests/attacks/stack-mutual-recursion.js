// expect: LimitExceeded recursion_depth
// backend: 0
function a() { return b(); }
function b() { return a(); }
a()
