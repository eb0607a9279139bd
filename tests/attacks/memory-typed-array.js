// expect: RuntimeError
// backend: 0
const views = [];
for (let i = 0; i < 1000; i++) views.push(new Float64Array(1 << 20));
views.length
