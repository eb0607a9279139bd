const a = new Uint8Array(1 << 20);
a.fill(7);
a.fill(1, 1000, 2000);
a[0] + a[1500] + a[a.length - 1]
