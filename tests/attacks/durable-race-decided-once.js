// expect: ok
// durable: approve
// backend: 2
// result: "timer"
// A timer races a change that waits for a person, and the winner decides
// which further change is made. On replay the race is decided as it was
// (the journal holds the order things arrived in), so neither change is
// made twice and no branch the first run did not take is taken.
const first = await Promise.race([
  tools.vm_stop({node: 'pve2', vmid: 104}).then(() => 'stop'),
  new Promise((resolve) => setTimeout(() => resolve('timer'), 1)),
]);
if (first === 'timer') {
  await tools.vm_stop({node: 'pve2', vmid: 105});
}
first
