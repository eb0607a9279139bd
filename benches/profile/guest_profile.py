"""Where a script's time goes inside the JavaScript guest.

Reads `perf script` output (samples with call chains; see profile.sh) and
takes every sample whose stack passes through the guest's entry
(`airlock_run`). Each is charged to the nearest guest frame (the compiled
guest in ~/.cache/airlock/*.cwasm is an ELF file with the guest's symbols,
so perf names its functions), and that frame to an area of the engine by
its name. Host code the guest called into (wasmtime libcalls such as
`memory.copy`, page faults) is listed too: it is the guest's work.

    perf script -i perf.data | python3 guest_profile.py
"""

import collections
import re
import sys

AREAS = [
    ("regex (regress)", r"regress"),
    ("JSON (serde_json, guest json.rs)", r"serde_json|airlock_guest4json|json\.\.|JSON|Json"),
    ("garbage collector", r"boa_gc"),
    ("allocator (dlmalloc)", r"dlmalloc|dlfree|dlrealloc|\bmalloc\b|\bfree\b|realloc|__rust_alloc|__rust_dealloc|__rdl_|RawVec|finish_grow|reserve"),
    ("strings", r"boa_string|JsString|JsStr|string"),
    ("property access and shapes", r"property|get_own|ordinary_get|ordinary_set|PropertyMap|shape|Shape|get_by_name|set_by_name|define_own|internal_methods|PropertyKey|hashbrown|indexmap"),
    ("calls and frames", r"push_frame|pop_frame|function_call|JsObject\$GT\$4cal|handle_call|CallFrame|calling_convention|handle_return|check_return|native_function|Closure"),
    ("array builtins", r"builtins5array|builtins..array|compare_array"),
    ("parser and bytecode compiler", r"boa_parser|bytecompiler|boa_ast|optimizer|boa_interner"),
    ("interpreter loop and opcodes", r"vm6opcode|vm..opcode|Vm\$GT\$3run|Context\$GT\$3run|Script8evaluate|handle_|JsValue|value.*operations|to_number|fmod"),
]

def area(sym):
    """The engine area a guest symbol belongs to (perf cuts long names, so
    the patterns match their starts)."""
    for name, rx in AREAS:
        if re.search(rx, sym):
            return name
    return "other guest code"

def samples(lines):
    """Yields each sample's frames, leaf first, as (symbol, dso)."""
    cur = []
    for l in lines:
        if not l.strip():
            if cur: yield cur
            cur = []
        elif l.startswith((" ", "\t")):
            parts = l.strip().split(None, 1)
            if len(parts) == 2:
                sym_dso = parts[1]
                m = re.match(r"(.*) \((.*)\)$", sym_dso)
                cur.append((m.group(1), m.group(2)) if m else (sym_dso, ""))
        else:
            cur = []
    if cur: yield cur

total = 0; guest = 0
by_area = collections.Counter(); by_sym = collections.Counter(); leaf_host = collections.Counter()
for frames in samples(sys.stdin):
    total += 1
    if not any("airlock_run" in s for s, _ in frames):
        continue
    guest += 1
    g = next(((s, d) for s, d in frames if ".cwasm" in d), None)
    if g is None:
        continue
    sym = re.sub(r"\+0x[0-9a-f]+$", "", re.sub(r"^wasm\[0\]::function\[\d+\]::", "", g[0]))
    a = area(sym)
    if ".cwasm" not in frames[0][1]:
        leaf = frames[0][0].split("+")[0]
        leaf_host[f"{leaf} (host, called from {a})"] += 1
    by_area[a] += 1
    by_sym[sym[:110]] += 1

print(f"{total} samples, {guest} in the guest ({100*guest/max(total,1):.0f}%)")
if guest == 0:
    sys.exit("no sample passed through the guest's entry: is the guest built with its names (no wasm-opt without -g)?")
for a, n in by_area.most_common():
    print(f"  {100*n/guest:5.1f}%  {a}")
print("top guest frames:")
for s, n in by_sym.most_common(12):
    print(f"  {100*n/guest:5.1f}%  {s}")
if leaf_host:
    print("host code the guest called (libcalls, imports):")
    for s, n in leaf_host.most_common(5):
        print(f"  {100*n/guest:5.1f}%  {s}")
