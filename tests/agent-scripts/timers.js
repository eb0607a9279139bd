const wait = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
await wait(5);
"waited"
