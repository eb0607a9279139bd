// expect: ok
// durable: approve
// backend: 2
// result: 2
// Two changes asked at once wait for their decisions together; approved,
// each is made once, whatever the replay does.
const down = await Promise.all([100, 102].map((vmid) => tools.vm_shutdown({node: 'pve1', vmid, timeout: 21})));
down.length
