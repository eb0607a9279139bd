// expect: ok
// backend: 0
// result: "refused"
let s = '';
for (let i = 0; i < 100000; i++) s += '[';
let r;
try { JSON.parse(s); r = 'parsed'; } catch (e) { r = 'refused'; }
r
