type Guest = { vmid: number; status: string };
function isRunning(g: Guest): g is Guest & { status: "running" } { return g.status === "running"; }
const guests: Guest[] = await tools.vm_list({ node: "pve1" });
guests.filter(isRunning).length
