#!/usr/bin/env sh
# Installs what the tests run from npm into .test-servers/ (git-ignored):
# - the MCP servers of tests/mcp (the PyPI ones, mcp-server-time and mcp-server-git, come with
#   the `test` extra) and the official AG-UI client the AG-UI tests drive
#   (tests/service/agui_client.cjs);
# - the official MCP conformance suite of tests/mcp/test_conformance.py, pinned, with the
#   Node >= 22 it needs from npm's `node` package (the system's Node stays as it is).
set -eu
cd "$(dirname "$0")/.."
mkdir -p .test-servers
npm install --prefix .test-servers --no-audit --no-fund --silent \
    @modelcontextprotocol/server-everything@">=2026.8.31" \
    @ag-ui/client@1.0.0 @ag-ui/core@1.0.0
mkdir -p .test-servers/conformance
npm install --prefix .test-servers/conformance --no-audit --no-fund --silent --save-exact \
    node@22 @modelcontextprotocol/conformance@0.2.0-alpha.12
