"""The CPU generator: batched sampling with a KV cache over plain Hugging Face models.

Token ids in, token ids and behaviour logprobs out. Sequences that finish (end of sequence, a stop
string such as an action end tag, or their token budget) leave the batch at once, so the cost of a
step follows the number of live sequences, not the longest one.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from agentic_rl.types import Completion, SamplingParams


def _top_p_filter(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask tokens outside the smallest set whose probability reaches top_p (per row).

    logits [N, V], top_p [N] -> logits with -inf outside the nucleus."""
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = probs.cumsum(-1) - probs
    drop_sorted = mass_before >= top_p.unsqueeze(-1)
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


class HFGenerator:
    """`Generator` over a transformers causal LM living in this process.

    The model object is shared with the learner on CPU, so `update_weights` has nothing to copy
    (it accepts a state dict for generators that own a separate copy). `logprobs` are under the
    policy's own distribution (temperature 1), the quantity the learner recomputes; temperature
    and top-p only shape which tokens are sampled.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        max_batch_size: int = 64,
        eos_token_ids: Sequence[int] | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        eos = list(eos_token_ids or [])
        if not eos and tokenizer.eos_token_id is not None:
            eos = [tokenizer.eos_token_id]
        self.eos_token_ids = set(eos)
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        # transformers renamed `past_key_values` to `cache`; support both.
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = "logits_to_keep" if "logits_to_keep" in params else None
        self.calls = 0  # generate() calls, for tests that count work
        self.prompt_tokens = 0  # prompt tokens prefilled, for tests that count work

    def update_weights(self, state: Mapping[str, torch.Tensor] | None = None) -> None:
        if state is not None:
            self.model.load_state_dict(dict(state), strict=False)

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[Completion]:
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        out: list[Completion] = []
        for start in range(0, len(prompts), self.max_batch_size):
            end = start + self.max_batch_size
            out.extend(self._generate_batch(prompts[start:end], params[start:end]))
        return out

    @torch.no_grad()
    def _generate_batch(
        self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]
    ) -> list[Completion]:
        from transformers import DynamicCache

        self.calls += 1
        n = len(prompts)
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt: a prompt needs at least one token")
        was_training = self.model.training
        self.model.eval()
        device = next(self.model.parameters()).device
        seed = params[0].seed
        gen = torch.Generator(device="cpu")
        gen.manual_seed(seed if seed is not None else torch.seed() % (2**63))

        width = max(len(p) for p in prompts)
        self.prompt_tokens += sum(len(p) for p in prompts)
        ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)
        attn = torch.zeros((n, width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: every row ends at the same column
            ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
            attn[i, width - len(p) :] = 1
        ids, attn = ids.to(device), attn.to(device)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)

        temps = torch.tensor([p.temperature for p in params], dtype=torch.float32)
        top_ps = torch.tensor([p.top_p for p in params], dtype=torch.float32)
        budgets = [p.max_new_tokens for p in params]
        stops = [list(p.stop) for p in params]
        tail_chars = [max((len(s) for s in st), default=0) for st in stops]

        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        reasons: list[str] = ["length"] * n
        alive = list(range(n))  # row r of the live batch is sequence alive[r]
        cache = DynamicCache()
        out = self._forward(ids, attn, positions, cache)
        logits = out.logits[:, -1, :].float()
        next_pos = positions[:, -1:] + 1
        while alive:
            rows = torch.tensor(alive)
            logprob_all = torch.log_softmax(logits, dim=-1)
            t = temps[rows].unsqueeze(-1)
            greedy = t.squeeze(-1) <= 0
            scaled = _top_p_filter(logits / t.clamp(min=1e-5), top_ps[rows])
            sampled = torch.multinomial(torch.softmax(scaled, dim=-1), 1, generator=gen).squeeze(-1)
            choice = torch.where(greedy, logits.argmax(-1), sampled)
            chosen_lp = logprob_all.gather(-1, choice.unsqueeze(-1)).squeeze(-1)
            keep: list[int] = []
            for r, seq in enumerate(alive):
                tok = int(choice[r])
                tokens[seq].append(tok)
                logps[seq].append(float(chosen_lp[r]))
                if tok in self.eos_token_ids:
                    reasons[seq] = "eos"
                elif self._hit_stop(tokens[seq], stops[seq], tail_chars[seq]):
                    reasons[seq] = "stop"
                elif len(tokens[seq]) >= budgets[seq]:
                    reasons[seq] = "length"
                else:
                    keep.append(r)
            if not keep:
                break
            if len(keep) < len(alive):  # finished sequences leave the batch
                idx = torch.tensor(keep, device=device)
                cache.batch_select_indices(idx)
                attn, next_pos, choice = attn[idx], next_pos[idx], choice[keep]
                alive = [alive[r] for r in keep]
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
            out = self._forward(choice.view(-1, 1).to(device), attn, next_pos, cache)
            logits = out.logits[:, -1, :].float()
            next_pos = next_pos + 1
        if was_training:
            self.model.train()
        return [
            Completion(
                token_ids=tokens[i],
                logprobs=logps[i],
                finish_reason=reasons[i],  # type: ignore[arg-type]
                text=self.tokenizer.decode(tokens[i], skip_special_tokens=False),
            )
            for i in range(n)
        ]

    def _forward(
        self, ids: torch.Tensor, attn: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> Any:
        kwargs: dict[str, Any] = {self._cache_kw: cache}
        if self._keep_kw:  # only the last position's logits: the prefill never builds [N, T, V]
            kwargs[self._keep_kw] = 1
        return self.model(
            input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True, **kwargs
        )

    def _hit_stop(self, tokens: list[int], stops: list[str], tail_chars: int) -> bool:
        """Did the newest token complete a stop string? Decodes only a short tail: each token is
        at least one character, so the last `tail_chars + 1` tokens contain any stop string."""
        if not stops:
            return False
        tail = self.tokenizer.decode(tokens[-(tail_chars + 1) :], skip_special_tokens=False)
        return any(s in tail for s in stops)
