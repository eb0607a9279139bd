// expect: ok
// backend: 0
// result: ["RangeError", "RangeError"]
// Options whose getters throw, and a locale list that is an array-like
// with a bad tag in it: read as the standard reads them, refused by name.
const hostile = { get style() { throw new RangeError("from a getter"); } };
const out = [];
try { new Intl.NumberFormat("en-US", hostile); } catch (e) { out.push(e.name); }
try { new Intl.NumberFormat({ length: 2, 0: "en-US", 1: "en_US" }); } catch (e) { out.push(e.name); }
out
