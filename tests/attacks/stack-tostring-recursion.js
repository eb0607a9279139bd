// expect: ok
// backend: 0
const o = { toString() { return String(o); } };
String(o)
