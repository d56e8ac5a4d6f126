"""The field's real benchmarks as environments, each scored by the benchmark's own checker
(BFCL: bfcl.py single-turn, bfcl_multi_turn.py multi-turn, bfcl_data.py their data and splits;
ScienceWorld: scienceworld.py; TextWorldExpress: textworld_express.py; those two share
text_game.py, the text-game turns and score rewards, and jvm.py, one JVM per process;
ALFWorld: alfworld.py, the user's own game files on TextWorld's PDDL engine, also on text_game.py;
WebShop: webshop.py, the user's own products and human instructions on the shop's pages of
envs/worlds/webshop.py)."""
