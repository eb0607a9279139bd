// expect: ok
// durable: approve
// backend: 1
// result: "stopped one"
// The guest it stops depends on clocks and random numbers read before the
// change waits for a person. A replay that saw other readings than the
// run that asked would pick the other guest and stop it too: each
// reading is journaled, so the replay picks the same one.
const pick = (Date.now() + new Date().getTime() + Math.floor(Math.random() * 1e6)) % 2;
await tools.vm_stop({node: 'pve3', vmid: pick === 0 ? 107 : 108});
"stopped one"
