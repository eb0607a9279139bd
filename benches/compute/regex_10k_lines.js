const lines = [];
for (let i = 0; i < 10000; i++) lines.push(`2026-12-01T10:${String(i % 60).padStart(2, '0')}:00Z pve${i % 3} ${i % 17 == 0 ? 'ERROR' : 'INFO'} task ${i} finished in ${i % 100} ms`);
lines.filter((l) => /ERROR .* finished in \d+ ms/.test(l)).length
