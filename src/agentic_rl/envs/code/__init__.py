"""Code agents: repairing a bug from an issue text (SWE-RL) and Absolute Zero's code-reasoning
self-play; their shipped task data in data/.
"""
