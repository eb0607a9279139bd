// Runs the stop_node_guests runbook for pve3 (see docs/CONFIGURATION.md,
// "Runbooks"): its shutdowns need no approval of their own once another
// operator approved the runbook's version.
const r = await runbooks.stop_node_guests({ node: "pve3", timeout: 30 });
r.stopped;
