// expect: ok
// backend: 0
// result: "refused"
let r;
try { await import('fs'); r = 'imported'; } catch (e) { r = 'refused'; }
r
