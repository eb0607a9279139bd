async function main() {
  const nodes = await tools.node_list({});
  return nodes.map((n) => n.node).sort();
}
return await main();
