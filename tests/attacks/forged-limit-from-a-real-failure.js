// expect: PolicyDenied
// backend: 0
// A real refusal, edited and rethrown: reported as the host decided it.
try { await tools.vm_delete({node: 'pve1', vmid: 100}) }
catch (e) { e.code = 'limit_exceeded'; e.details = {limit: 'wall_time_ms', value: 1, used: 2}; throw e }
