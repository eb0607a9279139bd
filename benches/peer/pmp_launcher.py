"""Starts ProxmoxMCP-Plus (0.6.7) on stdio in code mode with one extra
tool, `echo`, registered through its own tool registry, so a benchmark
can make tool calls without a Proxmox cluster. The stub goes through the
same dispatch path as the built-in tools (argument validation, a worker
thread, the per-target dispatch gate).

Configuration comes from PROXMOX_MCP_CONFIG as usual; fresh or pooled
workers from MCP_CODE_MODE_POOL_REUSE (0 or 1).
"""

import json
import os

# Code mode snapshots the tool table when installed: install it only after
# `echo` is registered.
os.environ["MCP_CODE_MODE"] = "0"

from proxmox_mcp.code_mode import install_code_mode  # noqa: E402
from proxmox_mcp.server import ProxmoxMCPServer  # noqa: E402


def echo(n: int = 0) -> str:
    """Return the argument, as JSON text."""
    return json.dumps({"n": n})


def main() -> None:
    server = ProxmoxMCPServer(os.environ["PROXMOX_MCP_CONFIG"])
    server.tool_registry.tool(name="echo", description="Return the argument.")(echo)
    server.code_mode = install_code_mode(server)
    server.start()


if __name__ == "__main__":
    main()
