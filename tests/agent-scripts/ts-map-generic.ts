const byNode = new Map<string, number[]>();
const nodes: { node: string }[] = await tools.node_list({});
for (const n of nodes) {
  const guests: { vmid: number }[] = await tools.vm_list({ node: n.node });
  byNode.set(n.node, guests.map((g) => g.vmid));
}
[...byNode.values()].reduce((sum: number, ids: number[]) => sum + ids.length, 0)
