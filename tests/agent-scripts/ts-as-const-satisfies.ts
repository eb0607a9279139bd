const order = { running: 0, stopped: 1 } as const;
const labels = { running: "up", stopped: "down" } satisfies Record<keyof typeof order, string>;
Object.entries(labels).sort(([a], [b]) => order[a as keyof typeof order] - order[b as keyof typeof order]).map(([, v]) => v)
