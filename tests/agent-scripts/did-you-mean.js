await tools.vm_lst({ node: "pve1" })
