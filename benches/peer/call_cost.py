"""What one backend call costs `airlock serve`: CPU time and context
switches of the server process per `tools.node_list({})`, against an
`airlock sim` in a process of its own (so the simulator's work is not
counted), through a raw JSON-RPC client over stdio (so no SDK's work is
in the way of the server's).

Each execution makes `--calls` sequential calls; the server's CPU (the
sum of its threads' schedstat) and context switches (the sum of its
threads' voluntary and involuntary switches, from /proc, Linux only) are
read before and after each execution. Several binaries, or one binary
under several environments, are measured alternately in one run:

    python benches/peer/call_cost.py target/release/airlock /tmp/airlock-old
    python benches/peer/call_cost.py target/release/airlock \
        --env TOKIO_WORKER_THREADS=1 --env ''

Needs only Python 3 (no packages).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def threads_of(pid):
    try:
        return os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []


def cpu_ns_and_switches(pid):
    """The process's CPU time (ns) and context switches, over all its
    live threads."""
    cpu = switches = 0
    for tid in threads_of(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                cpu += int(f.read().split()[0])
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.split(":")[0] in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
                        switches += int(line.split()[-1])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return cpu, switches


def start_sim(airlock, scratch):
    sim_dir = Path(scratch) / "sim"
    proc = subprocess.Popen(
        [airlock, "sim", "--port", "0", "--dir", str(sim_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    first = proc.stdout.readline()
    if not first.startswith("simulated Proxmox VE cluster: https://127.0.0.1:"):
        proc.kill()
        raise RuntimeError(f"airlock sim did not start: {first!r}")
    return proc, sim_dir


class Server:
    """`airlock serve` over stdio, spoken to line by line."""

    def __init__(self, binary, config, state, extra_env):
        env = dict(os.environ, AIRLOCK_STATE_DIR=str(state), AIRLOCK_LOG="error")
        env.pop("TOKIO_WORKER_THREADS", None)
        env.update(extra_env)
        self.proc = subprocess.Popen(
            [binary, "serve", "--config", str(config), "--identity", "rita"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )
        self.next_id = 0
        self.request("initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "call-cost", "version": "1"},
        })
        self.notify("notifications/initialized")

    def notify(self, method):
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method, params):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("the server closed its output")
            answer = json.loads(line)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    def execute(self, script):
        r = self.request("tools/call", {"name": "execute", "arguments": {"script": script}})
        if r.get("isError"):
            raise RuntimeError(f"execute failed: {r['content']}")
        return r["structuredContent"]["result"]

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--env", action="append", default=None,
                    help="NAME=VALUE[,NAME=VALUE] to run each binary under; repeat for several ('' for none)")
    ap.add_argument("--calls", type=int, default=50, help="calls per execution; 0 runs `1+1`")
    ap.add_argument("--executions", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    envs = args.env or [""]
    # With --calls 0, `1+1`: what an execution costs without a call.
    script = (f"let n = 0; for (let i = 0; i < {args.calls}; i++) n += (await tools.node_list({{}})).length; n"
              if args.calls else "1+1")
    with tempfile.TemporaryDirectory(prefix="airlock-call-cost-") as scratch:
        sim, sim_dir = start_sim(args.binaries[0], scratch)
        try:
            config = Path(scratch) / "airlock.toml"
            config.write_text((sim_dir / "airlock.toml").read_text() + "\n[rate]\ncalls_per_minute = 0\n")
            for rnd in range(args.rounds):
                for binary in args.binaries:
                    for env_text in envs:
                        extra = dict(kv.split("=", 1) for kv in env_text.split(",") if kv)
                        state = Path(scratch) / f"state-{rnd}"
                        shutil.rmtree(state, ignore_errors=True)
                        server = Server(binary, config, state, extra)
                        try:
                            for _ in range(3):
                                server.execute(script)
                            cpu, sw, wall = [], [], []
                            for _ in range(args.executions):
                                c0, s0 = cpu_ns_and_switches(server.proc.pid)
                                t0 = time.perf_counter()
                                server.execute(script)
                                wall.append(time.perf_counter() - t0)
                                c1, s1 = cpu_ns_and_switches(server.proc.pid)
                                cpu.append(c1 - c0)
                                sw.append(s1 - s0)
                        finally:
                            server.close()
                        row = {"round": rnd + 1, "binary": binary, "env": env_text}
                        if args.calls:
                            row["cpu ms per call"] = round(statistics.median(cpu) / 1e6 / args.calls, 4)
                            row["switches per call"] = round(statistics.median(sw) / args.calls, 2)
                        else:
                            row["cpu ms per execution"] = round(statistics.median(cpu) / 1e6, 4)
                            row["switches per execution"] = statistics.median(sw)
                        row["wall ms per execution"] = round(statistics.median(wall) * 1e3, 3)
                        print(json.dumps(row), flush=True)
        finally:
            sim.kill()
            sim.wait()


if __name__ == "__main__":
    sys.exit(main())
