class Tally {
  #n: number = 0;
  add(by: number): this { this.#n += by; return this; }
  get total(): number { return this.#n; }
}
const nodes = await tools.node_list({});
new Tally().add(nodes.length).add(1).total
