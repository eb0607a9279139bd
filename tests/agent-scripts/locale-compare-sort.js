const vms = (await Promise.all(["pve1", "pve2", "pve3"].map((node) => tools.vm_list({ node })))).flat();
vms.map((v) => `${v.name}`).sort((a, b) => a.localeCompare(b, undefined, { numeric: true })).slice(0, 4)
