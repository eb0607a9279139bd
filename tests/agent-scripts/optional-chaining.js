const guests = await tools.vm_list({ node: "pve1" });
const seen = {};
seen.first ??= guests[0]?.vmid;
seen.missing = guests[10000]?.name ?? "none";
seen
