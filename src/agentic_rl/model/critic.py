"""The PPO critic: which state values which token, and where the critic's states come from.

Alignment (the convention of veRL, TRL and OpenRLHF). Position t holds token x_t; its logprob
log pi(x_t | x_<t) is read from the state at t - 1, the last state that has not seen x_t. The
value of token t is read from that same state, V_t = V(x_<t): GAE's
delta_t = r_t + gamma V_{t+1} - V_t then compares the action x_t with the value of the state it
was chosen in. Reading V_t from the state at t (which has already read x_t) would value the
state-action pair, Q(x_<t, x_t): as the critic fits, the advantage of whatever token was sampled
would go to zero. `ValueHead` (model/load.py) does the shift; position 0 (nothing predicts it)
gets value 0.

Two critics (`algo.critic`):

- "shared": a value head on the policy's own last hidden states; one forward pass serves both,
  and the value loss trains the policy's trunk as well (cheap; the GRPO-era default of small
  setups, and this project's before `algo.critic`).
- "separate": `Critic`, its own copy of the backbone plus a value head, as Search-R1 and veRL
  run PPO (veRL's critic is a second model, initialised from the same checkpoint as the actor).
  The value loss never reaches the policy's weights; the critic has its own optimizer parameter
  group (`algo.critic_lr`) and its own gradient clipping. It costs a second forward (old values)
  and a second forward + backward (the update) over the batch, and a second copy of the weights
  and their AdamW state.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from agentic_rl.model.load import ValueHead
from agentic_rl.model.lora import unwrap
from agentic_rl.model.prefix_sharing import backbone_hidden


def _backbone(policy: nn.Module) -> nn.Module:
    """The transformer trunk (no output head) of a causal LM, a LoRA policy or the FSDP root
    around one (scale/fsdp.py's `CausalLMRoot`, which keeps the model as `.lm`)."""
    lm = unwrap(getattr(policy, "lm", policy))
    return getattr(lm, lm.base_model_prefix)


class Critic(nn.Module):
    """A separate critic: a copy of the policy's backbone and a `ValueHead`.

    `forward(input_ids, attention_mask, wanted, share_prefix)` -> values [B, T], value of token t
    from the critic's state at t - 1 (0 at position 0). `wanted` [B, T] bool marks the tokens
    whose values are used (the loss mask): with `share_prefix` a micro-batch runs as one packed
    row, the prompt its rows share once (model/packing.py), as the policy's passes do.

    Like a Hugging Face model it names its trunk through `base_model_prefix`, so the policy's
    machinery (prefix sharing, FSDP2's per-layer sharding) runs on it unchanged."""

    base_model_prefix = "backbone"

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.backbone = copy.deepcopy(_backbone(policy))
        for param in self.backbone.parameters():
            param.requires_grad_(True)
        self.config = self.backbone.config
        self.head = ValueHead(self.config.hidden_size)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        wanted: torch.Tensor | None = None,
        share_prefix: bool = False,
    ) -> torch.Tensor:
        hidden, _ = backbone_hidden(
            self, input_ids, attention_mask, wanted, share_prefix, every_position=True
        )
        return self.head(hidden)

    @torch.no_grad()
    def copy_backbone_from(self, policy: nn.Module) -> None:
        """Start the critic's trunk from the policy's current weights (after a warm start, as
        veRL initialises its critic from the actor's checkpoint); the value head is kept."""
        self.backbone.load_state_dict(_backbone(policy).state_dict())


def reads_policy_states(critic: nn.Module | None) -> bool:
    """Does the critic read the policy's hidden states (algo.critic=shared)? Then the policy's
    pass must return them (`token_logprobs(return_hidden=True)`)."""
    return critic is not None and not isinstance(critic, Critic)


def critic_values(
    critic: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    policy_hidden: torch.Tensor | None,
    wanted: torch.Tensor | None = None,
    share_prefix: bool = False,
) -> torch.Tensor:
    """Values [B, T] in float32, V_t = V(x_<t) (see the module docstring): a shared value head
    reads `policy_hidden` [B, T, H] (every position's state of the policy's pass), a separate
    critic runs its own backbone on the tokens."""
    if isinstance(critic, Critic):
        return critic(input_ids, attention_mask, wanted, share_prefix).float()
    if policy_hidden is None:
        raise ValueError("a shared value head needs the policy's hidden states (return_hidden)")
    return critic(policy_hidden).float()
