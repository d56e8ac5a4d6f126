"""Chat formats and action parsers: how tools are announced, how the model writes an action
(tags, hermes tool calls, tool-integrated reasoning formats) and how observations are rendered.
`registry.py` maps each `rollout.chat_format` name to its format."""
