const guests = await tools.vm_list({ node: "pve1" });
guests.reduce((acc, g) => ({ ...acc, [g.vmid]: g.status }), {})[100]
