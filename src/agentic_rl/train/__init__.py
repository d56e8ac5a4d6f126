"""Training: the loop (`loop`), what a run holds (`setup`), collecting episodes (`collect`),
reward shaping and batch filters (`shaping`), episodes -> the batch an update trains on (`batch`),
multi-stage recipes (`stages`), supervised and preference stages (`sft`, `dpo`), self-play
(`self_play`) and run summaries (`summary`)."""
