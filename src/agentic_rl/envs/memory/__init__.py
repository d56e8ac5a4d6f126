"""Memory agents: MemAgent's long-document reading, Memory-R1's memory manager and RMM, over a
persisted memory bank.
"""
