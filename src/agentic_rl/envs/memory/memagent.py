"""MemAgent's reading task (Yu et al. 2025, "MemAgent: Reshaping Long-Context LLM with
Multi-Conv RL-based Memory Agent"): answer a question about a document far longer than the
context window by reading it section by section into a fixed-size memory.

The env holds the text side: the prompts of MemAgent's two conversation kinds (chunk: problem +
previous memory + section -> updated memory; final: problem + memory -> answer), the baseline
readers' prompt (problem + the whole or truncated document), the answer check (exact match of
<answer>...</answer>, or \\boxed{...} as in MemAgent) and a scripted expert for warm starts. The
token side - cutting the document into sections of `chunk_tokens`, splicing the memory's sampled
ids into the next prompt, the memory budget - is `rollout/memory.py` (rollout.mode=memory), which
reads the settings below from the env.

Prompts carry placeholders (`MEMORY_SLOT`, `SECTION_SLOT`, `DOCUMENT_SLOT`) that the rollout
replaces with token ids, so neither the memory the model wrote nor the document is re-encoded
inside a chat template.
"""

from __future__ import annotations

import re

from agentic_rl.envs.memory.long_qa import document_text
from agentic_rl.rewards.qa import exact_match
from agentic_rl.tools.base import Tool
from agentic_rl.types import Action, Message, Observation, StepResult, Task

MEMORY_SLOT = "\x00memory\x00"
SECTION_SLOT = "\x00section\x00"
DOCUMENT_SLOT = "\x00document\x00"
NO_MEMORY = "No previous memory"  # MemAgent's first memory
READERS = ("memagent", "full", "truncate")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")

CHUNK_PROMPT = (
    "You are given a problem, a section of an article and your previous memory. Read the section "
    "and write an updated memory that keeps every fact that helps to answer the problem. Write "
    "only the memory.\n\n<problem>\n{problem}\n</problem>\n\n<memory>\n" + MEMORY_SLOT + "\n"
    "</memory>\n\n<section>\n" + SECTION_SLOT + "\n</section>\n\nUpdated memory:"
)
FINAL_PROMPT = (
    "You are given a problem and your memory of an article. Answer the problem from the memory. "
    "Write the answer as <answer>answer</answer>.\n\n<problem>\n{problem}\n</problem>\n\n"
    "<memory>\n" + MEMORY_SLOT + "\n</memory>\n\nYour answer:"
)
CONTEXT_PROMPT = (
    "You are given a problem and an article. Answer the problem from the article. Write the "
    "answer as <answer>answer</answer>.\n\n<problem>\n{problem}\n</problem>\n\n<article>\n"
    + DOCUMENT_SLOT
    + "\n</article>\n\nYour answer:"
)


class MemAgentEnv:
    """Question answering over a long document (`document_text`): one answer, exact-match reward.

    `reader` (env.options) picks how the rollout reads the document: "memagent" (sections into
    an overwritten memory), "full" (the whole document in one prompt; an error when it does not
    fit `context_tokens`) or "truncate" (as much of the document's head as fits).
    """

    # The document: a task-file row needs it (envs/base.py).
    task_fields = ("context",)
    expert_reads_task_files = True  # a row's facts: its sentences that hold an answer

    tools: list[Tool] = []
    memory_reader = True  # rollout.mode=memory plays this env (rollout/memory.py)

    def __init__(
        self,
        chunk_tokens: int = 1024,
        memory_tokens: int = 128,
        context_tokens: int = 8192,
        reader: str = "memagent",
        max_chunks: int = 0,
    ) -> None:
        if reader not in READERS:
            raise ValueError(f"reader must be one of {', '.join(READERS)}, got {reader!r}")
        if chunk_tokens < 1 or memory_tokens < 1 or context_tokens < 1 or max_chunks < 0:
            raise ValueError(
                "chunk_tokens, memory_tokens and context_tokens must be positive, max_chunks >= 0"
            )
        self.chunk_tokens = chunk_tokens
        self.memory_tokens = memory_tokens
        self.context_tokens = context_tokens
        self.reader = reader
        self.max_chunks = max_chunks  # 0 = read the whole document (training may cap it)
        self.task: Task | None = None
        self.kind = "final"
        self.section = ""
        self.end_of_turn = ""
        self.expert_memory: list[str] = []

    # -- what the rollout reads -----------------------------------------------------------
    def document(self) -> str:
        assert self.task is not None, "reset first"
        return document_text(self.task)

    def chunk_messages(self) -> list[Message]:
        """Conversation k < K: problem + previous memory + section -> updated memory."""
        return [{"role": "user", "content": CHUNK_PROMPT.format(problem=self._problem())}]

    def final_messages(self) -> list[Message]:
        """The last conversation: problem + memory -> answer."""
        return [{"role": "user", "content": FINAL_PROMPT.format(problem=self._problem())}]

    def context_messages(self) -> list[Message]:
        """The baselines' single conversation: problem + (truncated) document -> answer."""
        return [{"role": "user", "content": CONTEXT_PROMPT.format(problem=self._problem())}]

    def begin_conversation(self, kind: str, section: str = "", end_of_turn: str = "") -> None:
        """The rollout says what comes next ("memory" with its section's text, or "final"), so
        the scripted expert can play it; `end_of_turn` (the tokenizer's end-of-turn token) ends
        the expert's memories, so demonstrations teach the model to stop writing."""
        self.kind, self.section, self.end_of_turn = kind, section, end_of_turn

    def _problem(self) -> str:
        assert self.task is not None, "reset first"
        return self.task.prompt

    # -- the protocol ---------------------------------------------------------------------
    def reset(self, task: Task, seed: int) -> Observation:
        """Start on `task`; the opening messages are the final conversation's (empty memory):
        rollout.mode=memory builds every conversation's tokens itself."""
        self.task = task
        self.kind, self.section, self.expert_memory = "final", "", []
        messages = self.final_messages()
        messages[0] = {**messages[0], "content": messages[0]["content"].replace(MEMORY_SLOT, "")}
        return Observation(messages=messages)

    def step(self, action: Action) -> StepResult:
        """The final answer: exact match against the gold answers (MemAgent's reward). A turn
        without <answer> (or \\boxed{}) scores 0 and counts as an invalid action; it gets an
        error observation, but the rollout gives the final conversation one turn only."""
        assert self.task is not None, "reset first"
        text = action.text if action.kind == "answer" else None
        if text is None:
            boxed = _BOXED.findall(action.raw)
            text = boxed[-1] if boxed else None
        if text is None:
            error = Observation(content="no <answer>...</answer> in the reply", name="error")
            return StepResult(error, 0.0, info={"invalid_action": 1, "success": 0.0})
        score = exact_match(text, self.task.answers)
        return StepResult(None, score, True, info={"success": score})

    def expert_turn(self) -> str:
        """MemAgent's ideal reader: a memory with every supporting fact seen so far (the
        sentences of `fields["facts"]` found in this section, added to the previous ones; on a
        user's row without facts, `row_facts`), and finally the answer."""
        assert self.task is not None, "reset first"
        if self.kind == "final":
            return f"<answer>{self.task.answers[0]}</answer>"
        facts = self.task.fields.get("facts")
        for fact in row_facts(self.task) if facts is None else facts:
            if fact in self.section and fact not in self.expert_memory:
                self.expert_memory.append(fact)
        memory = ". ".join(self.expert_memory) + "." if self.expert_memory else "Nothing yet."
        return memory + self.end_of_turn


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def row_facts(task: Task) -> list[str]:
    """The supporting facts of a user's row ({context, question, answers}), which names none:
    the sentences of its `context` that contain a gold answer (case-insensitive), without their
    final full stop (the expert joins facts with ". "), in document order."""
    answers = [a.lower() for a in task.answers if a.strip()]
    sentences = _SENTENCE_END.split(str(task.fields.get("context", "")))
    return [
        sentence.strip().rstrip(".")
        for sentence in sentences
        if any(answer in sentence.lower() for answer in answers)
    ]
