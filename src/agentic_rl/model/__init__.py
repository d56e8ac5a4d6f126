"""The policy model: loading (bundled model, any HF directory), token logprobs under the
vocabulary projection, CPU attention, packing and prefix sharing, LoRA."""
