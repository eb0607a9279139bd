const nodes: { node: string }[] = await tools.node_list({});
if (nodes.length > 1) {
  `${nodes.length} nodes`
} else {
  "one node"
}
