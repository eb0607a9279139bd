const a = new Uint8Array(1 << 20);
for (let i = 0; i < a.length; i++) a[i] = i & 255;
let s = 0;
for (let i = 0; i < a.length; i++) s += a[i];
s
