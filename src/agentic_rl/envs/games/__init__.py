"""Games and puzzles with named actions (RAGEN-style): Sokoban, the grid world, the bandit,
Countdown, Blocksworld, and any Gymnasium env with a text rendering.
"""
