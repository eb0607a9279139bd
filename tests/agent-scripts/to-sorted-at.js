const guests = await tools.vm_list({ node: "pve1" });
const ids = guests.map((g) => g.vmid).toSorted((a, b) => a - b);
[ids.at(0), ids.at(-1)]
