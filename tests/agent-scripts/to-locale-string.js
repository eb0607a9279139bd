const vms = await tools.vm_list({ node: "pve1" });
const bytes = vms.reduce((sum, v) => sum + v.maxdisk, 0);
`${vms.length} guests, ${bytes.toLocaleString()} bytes of disk (${(bytes / 2 ** 30).toLocaleString("en-US", { maximumFractionDigits: 0 })} GiB)`
