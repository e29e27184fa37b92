"""The MCP client (``dshtools.mcp.MCPClient``): the tools of an MCP server as
registry tools whose cancellation reaches the server (docs/mcp.md)."""
