namespace Fleet { export const nodes = ["pve1"]; }
Fleet.nodes
