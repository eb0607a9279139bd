// expect: RuntimeError
// backend: 0
const a = {};
a.self = a;
a
