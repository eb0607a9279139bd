// expect: ok
// backend: 0
// result: 2
// Each call names 3,000 argument keys (about as many as args_bytes allows
// two calls): refused by validation, and each refusal's audit line stays
// small (the keys are capped there).
const args = {node: 'pve1', vmid: 100};
for (let i = 0; i < 3000; i++) args['k' + i] = 1;
let refused = 0;
for (let i = 0; i < 2; i++) { try { await tools.vm_status(args) } catch (e) { if (e.code === 'invalid_arguments') refused++; } }
refused
