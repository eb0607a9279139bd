const f = (x) => x + 1; let s = 0; for (let i = 0; i < 300000; i++) s = f(s); s
