// expect: LimitExceeded
// backend: 0
const spin = () => Promise.resolve().then(spin);
spin();
await new Promise(() => {})
