// expect: ok
// backend: 0
// result: 10
let n = 0;
for (let i = 0; i < 10; i++) { try { await tools.vm_delete({node: 'pve1', vmid: 100}); } catch (e) { if (e.code === 'policy_denied') n++; } }
n
