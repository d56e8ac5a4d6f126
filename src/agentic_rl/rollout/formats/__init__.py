"""Chat formats and action parsers: tags and hermes tool calls (`chat`), tool-integrated
reasoning formats (`tir`)."""
