"""Generators behind one protocol (`base`): Hugging Face on CPU/GPU (`hf`), vLLM on GPU (`vllm`)."""
