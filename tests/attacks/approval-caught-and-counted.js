// expect: ok
// backend: 0
// result: 2
let n = 0;
for (const vmid of [100, 102]) { try { await tools.vm_stop({node: 'pve1', vmid}); } catch (e) { if (e.code === 'approval_required') n++; } }
n
