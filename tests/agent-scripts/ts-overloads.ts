function pad(x: number): string;
function pad(x: string): string;
function pad(x: number | string): string { return String(x).padStart(4, "0"); }
[pad(7), pad("42")]
