"""Math: generated problems with exact answers, and envs that solve them with a calculator, a
Python interpreter (ReTool, rStar2-Agent) or several tools (ARTIST).
"""
