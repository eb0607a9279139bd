const rows = [];
for (let i = 0; i < 1000; i++) rows.push({ id: i, name: 'vm-' + i, node: 'pve' + (i % 3), tags: ['a', 'b'], mem: i * 1048576, running: i % 2 == 0 });
JSON.parse(JSON.stringify(rows)).length
