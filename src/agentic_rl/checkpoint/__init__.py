"""Checkpoints: atomic write/read (`io`), the layout on disk (`layout`), FSDP2 sharded
checkpoints (`sharded`) and export as a plain Hugging Face model (`export`)."""
