const a = []; let x = 12345;
for (let i = 0; i < 20000; i++) { x = (x * 48271) % 2147483647; a.push(x); }
a.sort((p, q) => p - q); a[0] + a[19999]
