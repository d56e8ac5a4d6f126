"""The HF generator's behaviour logprobs are of the distribution it samples from (logits / T,
renormalised over the top-p nucleus), the same distribution the learner computes at the
sampling temperature."""

import pytest
import torch

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.model.load import token_logprobs
from agentic_rl.types import SamplingParams


def _learner(model, prompt, completion, temperature):
    ids = torch.tensor([prompt + completion.token_ids])
    lp, _, _ = token_logprobs(model, ids, torch.ones_like(ids), temperature=temperature)
    return lp[0, len(prompt) :]


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.5])
def test_behaviour_logprobs_match_the_learner_at_the_sampling_temperature(
    tiny, tokenizer, temperature
):
    prompt = tokenizer("What is the capital of")["input_ids"]
    gen = HFGenerator(tiny, tokenizer)
    params = SamplingParams(max_new_tokens=8, temperature=temperature, seed=3)
    (out,) = gen.generate([prompt], params)
    behaviour = torch.tensor(out.logprobs)
    torch.testing.assert_close(
        behaviour, _learner(tiny, prompt, out, temperature), atol=1e-4, rtol=0
    )
    if temperature != 1.0:  # not the policy at temperature 1
        assert (behaviour - _learner(tiny, prompt, out, 1.0)).abs().max() > 1e-2


def test_top_p_behaviour_logprobs_are_of_the_renormalised_nucleus(tiny, tokenizer):
    """With top_p < 1 each sampled token's behaviour probability is p_T(x) / Z, Z <= 1 the
    nucleus's mass under the learner's p_T: learner - behaviour = log Z <= 0."""
    prompt = tokenizer("Hello there")["input_ids"]
    gen = HFGenerator(tiny, tokenizer)
    (out,) = gen.generate([prompt], SamplingParams(max_new_tokens=8, temperature=0.8, top_p=0.5))
    log_z = _learner(tiny, prompt, out, 0.8) - torch.tensor(out.logprobs)
    assert (log_z <= 1e-5).all() and (log_z < -1e-3).any()
    # Z at the first position, by hand: the smallest set of tokens whose mass reaches 0.5
    logits = tiny(input_ids=torch.tensor([prompt])).logits[0, -1].float() / 0.8
    probs = torch.softmax(logits, -1).sort(descending=True).values
    before = probs.cumsum(0) - probs
    z = float(probs[before < 0.5].sum())
    assert float(log_z[0]) == pytest.approx(torch.tensor(z).log().item(), abs=1e-4)


def test_greedy_requests_report_temperature_one(tiny, tokenizer):
    prompt = tokenizer("A")["input_ids"]
    gen = HFGenerator(tiny, tokenizer)
    (out,) = gen.generate([prompt], SamplingParams(max_new_tokens=5, temperature=0.0))
    expected = _learner(tiny, prompt, out, 1.0)
    torch.testing.assert_close(torch.tensor(out.logprobs), expected, atol=1e-4, rtol=0)
