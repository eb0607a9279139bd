export default async (): Promise<number> => (await tools.node_list({})).length;
