"""Scaling out on existing engines: FSDP2 under torchrun (`fsdp`), asynchronous rollouts
(`async_rollout`), envs and the generator on Ray actors (`ray_pool`, `ray_generator`)."""
