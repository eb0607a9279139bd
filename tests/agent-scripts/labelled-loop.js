const guests = await tools.vm_list({ node: "pve1" });
let found = null;
outer: for (const g of guests) {
  for (const want of [101, 102]) {
    if (g.vmid === want) { found = g.vmid; break outer; }
  }
}
found
