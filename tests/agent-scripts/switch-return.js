const nodes = await tools.node_list({});
switch (nodes.length) {
  case 1: return "single";
  case 3: return "three";
  default: return "many";
}
