type Node = { node: string };
const nodes: Node[] = await tools.node_list({});
const lists: unknown[][] = await Promise.all(nodes.map((n: Node) => tools.vm_list({ node: n.node })));
lists.reduce((sum: number, l) => sum + l.length, 0)
