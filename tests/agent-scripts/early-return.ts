const guests: { vmid: number }[] = await tools.vm_list({ node: "pve1" });
if (guests.length === 0) return "no guests";
return `${guests.length} guests`;
