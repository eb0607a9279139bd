// expect: ok
// backend: 0
// result: "done"
for (let i = 0; i < 100000; i++) Promise.reject(new Error('x'));
'done'
