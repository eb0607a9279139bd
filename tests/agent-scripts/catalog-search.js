const { hits } = await catalog.search("list virtual machines on a node");
hits.some((h) => h.name === "vm_list")
