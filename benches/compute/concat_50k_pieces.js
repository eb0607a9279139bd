let s = ''; for (let i = 0; i < 50000; i++) s += 'x' + (i % 10); s.length
