async () => {
  const nodes = await tools.node_list({});
  return nodes.map((n) => n.node).sort();
}
