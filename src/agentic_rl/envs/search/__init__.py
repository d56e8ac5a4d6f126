"""Search and research agents: single-hop and two-hop QA over generated corpora, the search agents'
reward schemes, web research (search + browse) and ZeroSearch's simulated engine.
"""
