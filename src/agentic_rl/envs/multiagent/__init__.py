"""Multi-agent systems: several roles in one episode, exchanging messages through the env (the planner / executor search team)."""
