// expect: ok
// backend: 0
// result: true
// Fifty distinct shutdowns at once, each needing a person: the approver is
// not asked fifty times (open requests per identity are capped).
const r = await Promise.allSettled(Array.from({length: 50}, (_, i) => tools.vm_stop({node: 'pve1', vmid: 100 + i})));
const codes = r.map((x) => x.reason && x.reason.code);
const filed = codes.filter((c) => c === 'approval_required').length;
filed <= 20 && codes.some((c) => c !== 'approval_required')
