// expect: RuntimeError
// backend: 0
let v = [];
for (let i = 0; i < 100000; i++) v = [v];
v
