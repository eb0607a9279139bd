const a = []; let x = 12345;
for (let i = 0; i < 20000; i++) { x = (x * 1103515245 + 12345) % 2147483648; a.push(x); }
a.sort((p, q) => p - q); a[0] + a[19999]
