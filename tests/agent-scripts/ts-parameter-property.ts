class Node { constructor(public name: string) {} }
new Node("pve1").name
