export interface Summary { nodes: number }
export type Names = string[];
const s: Summary = { nodes: (await tools.node_list({})).length };
s.nodes
