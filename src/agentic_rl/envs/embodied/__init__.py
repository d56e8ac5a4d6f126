"""Embodied envs: language-instructed navigation in a generated indoor map (navigation.py,
VLN-R1; the house in house.py, its top-down picture in house_render.py) and arm-and-blocks
manipulation with discretised action tokens (manipulation.py, VLA-RL). Both are
text-observation envs built on envs/discrete.py's `<action>` turn."""
