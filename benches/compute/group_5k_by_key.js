const rows = [];
for (let i = 0; i < 5000; i++) rows.push({ id: i, node: 'pve' + (i % 7), status: i % 3 ? 'running' : 'stopped', mem: i * 1024 });
const g = {}; for (const r of rows) { (g[r.node] ||= []).push(r); }
Object.keys(g).map((k) => g[k].length)
