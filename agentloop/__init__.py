"""A reference agent loop (seed 004) that acts only through Gatehouse's MCP endpoint.

`loop.AgentLoop` runs a model against the tools Gatehouse lists for one agent,
with budgets, errors as data, derived idempotency keys, parallel calls and
compensation; `models` has a scripted model and an OpenAI-compatible client;
`mcp_client.Gatehouse` is the SDK connection; `scenarios` holds scripts.
"""
