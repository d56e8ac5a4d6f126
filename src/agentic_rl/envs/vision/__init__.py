"""Envs whose observations are pictures: scene questions and the grid as a picture (scenes.py),
scene reasoning (Vision-R1), chart tools (OpenThinkImg) and planning in image tokens (VPRL).
"""
