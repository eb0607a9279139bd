try {
  await tools.vm_status({ node: "pve1", vmid: 999999 });
  "found"
} catch (e) {
  "missing: " + e.code
}
