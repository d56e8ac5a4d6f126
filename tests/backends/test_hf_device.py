"""The HF generator's sampler on the logits' device: nothing it makes stays on the CPU.

A CUDA generator (trainer.device=cuda, or a Ray generator actor on a GPU) hands the sampler
CUDA logits; a CPU tensor (a temperature column, the uniform draw, an index) meeting them fails
the first call. Without a GPU the same property is checked on torch's "meta" device, which
refuses to mix with CPU tensors exactly as CUDA does; on a GPU the real device runs too."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.backends.sampling import draw_tokens, sample_step
from agentic_rl.model.load import token_logprobs
from agentic_rl.types import SamplingParams

SETTINGS = {
    "temperature 1, no nucleus": ([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]),
    "temperature and top-p per row": ([0.7, 1.0, 1.3], [1.0, 0.9, 0.5]),
    "greedy rows among sampled ones": ([0.0, 0.8, 0.0], [1.0, 0.95, 1.0]),
}
DEVICES = ["meta", pytest.param("cuda", marks=pytest.mark.gpu)]


def test_a_cpu_tensor_meeting_meta_logits_fails_as_it_would_on_cuda():
    """The premise of the meta checks below: mixing devices raises on meta as on CUDA."""
    logits = torch.randn(3, 8, device="meta")
    with pytest.raises(RuntimeError, match="device"):
        _ = logits / torch.ones(3, 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_sample_step_follows_the_logits_device(device, setting):
    temperatures, top_ps = SETTINGS[setting]
    logits = torch.randn(3, 1000, device=device)  # not a multiple of the sampling block
    choice, logprobs = sample_step(
        logits, temperatures, top_ps, torch.tensor([0.3, 0.6, 0.9]).double()
    )
    assert choice.device == logits.device and logprobs.device == logits.device
    assert choice.shape == (3,) and logprobs.shape == (3,) and choice.dtype == torch.long


@pytest.mark.parametrize("device", DEVICES)
def test_inverse_cdf_sampling_follows_the_probabilities_device(device):
    probs = torch.softmax(torch.randn(5, 700, device=device), dim=-1)
    assert draw_tokens(probs, torch.rand(5, dtype=torch.float64)).device == probs.device


def test_sample_step_on_the_cpu_is_the_distribution_it_reports():
    """CPU reference numbers: greedy rows take the argmax with its temperature-1 logprob; the
    others report the logprob of softmax(logits / T) over the nucleus they were drawn from."""
    logits = torch.randn(3, 1000, generator=torch.Generator().manual_seed(3))
    temperatures, top_ps = SETTINGS["greedy rows among sampled ones"]
    choice, logprobs = sample_step(
        logits, temperatures, top_ps, torch.tensor([0.3, 0.6, 0.9]).double()
    )
    at_one = torch.log_softmax(logits, -1)
    for row in (0, 2):
        assert choice[row] == logits[row].argmax()
        torch.testing.assert_close(logprobs[row], at_one[row, choice[row]])
    scaled = torch.log_softmax(logits[1] / 0.8, -1)
    assert logprobs[1] >= scaled[choice[1]] - 1e-6  # renormalised over the nucleus: >= full
    again = sample_step(logits, temperatures, top_ps, torch.tensor([0.3, 0.6, 0.9]).double())
    assert torch.equal(again[0], choice) and torch.equal(again[1], logprobs)


@pytest.mark.gpu
def test_the_generator_samples_on_the_gpu_with_the_learners_logprobs(tiny, tokenizer):
    model = tiny.to("cuda")
    generator = HFGenerator(model, tokenizer)
    prompt = tokenizer("Hello there", add_special_tokens=False)["input_ids"]
    params = [SamplingParams(max_new_tokens=8, temperature=1.0, seed=1)] * 2
    params.append(SamplingParams(max_new_tokens=8, temperature=0.0))
    completions = generator.generate([prompt] * 3, params)
    for c in completions:
        ids = torch.tensor([prompt + c.token_ids], device="cuda")
        lp, _, _ = token_logprobs(model, ids, torch.ones_like(ids))
        learner = lp[0, len(prompt) :].float().cpu()
        torch.testing.assert_close(learner, torch.tensor(c.logprobs), atol=1e-3, rtol=0)
