"""Serving the policy to agents written outside the framework (`agentic-rl serve-policy`).

`openai_api` speaks the OpenAI chat-completions format, `recorder` turns the calls of an episode
into one token-native Trajectory, `policy_server` is the HTTP service (and the in-process
`PolicyService`), `export` writes and reads the episodes as JSONL.
"""
