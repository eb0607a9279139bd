// expect: LimitExceeded wall_time_ms
// backend: 0
const again = () => setTimeout(again, 0);
again();
await new Promise(() => {})
