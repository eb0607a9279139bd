interface Guest { vmid: number; name?: string; status: string }
function countBy<T>(xs: T[], key: (x: T) => string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const x of xs) out[key(x)] = (out[key(x)] ?? 0) + 1;
  return out;
}
const guests: Guest[] = await tools.vm_list({ node: "pve1" });
countBy<Guest>(guests, (g) => g.status)
