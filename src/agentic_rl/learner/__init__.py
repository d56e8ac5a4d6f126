"""The learner: episodes -> padded tensors (`batch`), advantages and one policy update (`update`)."""
