const rows = [];
for (let i = 0; i < 10000; i++) {
  rows.push({ id: i, name: `vm-${i}`, node: `pve${i % 3}`, status: i % 4 ? 'running' : 'stopped', cpus: 1 + (i % 8),
    mem: (i % 64) * 1048576, disk: i * 4096, uptime: i * 60, tags: 'prod', pool: `p${i % 5}` });
}
rows.filter((r) => r.status === 'running')
  .map((r) => ({ node: r.node, mib: r.mem / 1048576, cpus: r.cpus }))
  .reduce((acc, r) => { acc[r.node] = (acc[r.node] || 0) + r.mib * r.cpus; return acc; }, {})
