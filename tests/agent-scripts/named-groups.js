const m = /(?<node>pve\d+)-(?<id>\d+)/.exec("guest pve2-104 running");
[m.groups.node, Number(m.groups.id)]
