#!/usr/bin/env sh
# Installs the npm MCP servers the tests run (tests/mcp) and the official AG-UI client the
# AG-UI tests drive (tests/service/agui_client.cjs) into .test-servers/ (git-ignored).
# The PyPI servers (mcp-server-time, mcp-server-git) come with the `test` extra.
set -eu
cd "$(dirname "$0")/.."
mkdir -p .test-servers
npm install --prefix .test-servers --no-audit --no-fund --silent \
    @modelcontextprotocol/server-everything@">=2026.8.31" \
    @ag-ui/client@1.0.0 @ag-ui/core@1.0.0
