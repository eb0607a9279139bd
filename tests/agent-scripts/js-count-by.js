const guests = await tools.vm_list({ node: "pve1" });
const out = {};
for (const g of guests) out[g.status] = (out[g.status] ?? 0) + 1;
out
