export default async function main(): Promise<string[]> {
  const nodes = await tools.node_list({});
  return nodes.map((n: { node: string }) => n.node).sort();
}
