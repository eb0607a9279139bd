const nodes: { node: string; status: string }[] = await tools.node_list({});
const names: string[] = nodes.map((n) => n.node).sort();
names
