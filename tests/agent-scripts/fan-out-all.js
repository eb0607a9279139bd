const nodes = await tools.node_list({});
const lists = await Promise.all(nodes.map((n) => tools.vm_list({ node: n.node })));
lists.reduce((sum, l) => sum + l.length, 0)
