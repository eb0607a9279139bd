function label(name?: string, fallback: string = "unnamed"): string {
  return name ?? fallback;
}
const guests: { vmid: number; name?: string }[] = await tools.vm_list({ node: "pve1" });
const first = guests.find((g) => g.vmid > 0)!;
typeof label(first.name) === "string" && label() === "unnamed"
