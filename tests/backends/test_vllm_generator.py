"""The vLLM generator's own logic against a stand-in engine (vLLM needs a GPU): request
building (with images for a vision-language policy), output conversion, weight and adapter
sync, sleep/wake, config. The real engine is exercised by the `gpu` test at the end and by
bench/gpu_check.sh; the image path has not run on a real engine."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from agentic_rl.backends import vllm as vb
from agentic_rl.backends.base import make_generator, release_for_update, sync_weights
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.rollout import ModelConfig
from agentic_rl.model import load as model_load
from agentic_rl.model.errors import ModelLoadError
from agentic_rl.model.images import ImageError, save_image
from agentic_rl.model.load import load_policy, load_tokenizer
from agentic_rl.model.tokens import encode_prompt
from agentic_rl.model.vision import IMAGE_TOKEN, VISION_TOKENS, spec_of_dir
from agentic_rl.types import SamplingParams


def out(ids, lps, reason="length", stop_reason=None, extra=None):
    """A vLLM CompletionOutput: per position a dict token id -> Logprob (the sampled one plus,
    here, a decoy to check the right entry is picked)."""
    positions = []
    for tok, lp in zip(ids, lps, strict=True):
        entry = {tok: SimpleNamespace(logprob=lp)}
        if extra is not None:
            entry[extra] = SimpleNamespace(logprob=-0.01)
        positions.append(entry)
    return SimpleNamespace(
        token_ids=ids, logprobs=positions, finish_reason=reason, stop_reason=stop_reason
    )


@dataclass
class FakeModel:
    loaded: list[list[tuple[str, torch.Tensor]]] = field(default_factory=list)

    def load_weights(self, weights):
        self.loaded.append(list(weights))


@dataclass
class FakeLLM:
    """Records what the generator asks of vllm.LLM; answers with scripted outputs.

    With `expansion` set it also does what vLLM's multimodal processor does to a token prompt
    with `multi_modal_data` (Idefics3: each `<image>` input token replaced by the picture's
    expanded placeholder, `image_token_id` -> `expansion`) and reports the result as the
    output's `prompt_token_ids`."""

    replies: list[Any] = field(default_factory=list)
    calls: list[dict] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)
    model: FakeModel = field(default_factory=FakeModel)
    llm_engine: Any = None
    image_token_id: int | None = None
    expansion: list[int] | None = None

    def __post_init__(self):
        self.llm_engine = SimpleNamespace(remove_lora=lambda i: self.events.append(("remove", i)))

    def generate(self, prompts, sampling, use_tqdm=True, lora_request=None):
        self.calls.append({"prompts": prompts, "sampling": sampling, "lora": lora_request})
        return [
            SimpleNamespace(outputs=[self.replies.pop(0)], num_cached_tokens=3, **self._seen(p))
            for p in prompts
        ]

    def _seen(self, prompt):
        if self.expansion is None:
            return {}
        ids = list(prompt["prompt_token_ids"])
        if "multi_modal_data" in prompt:
            ids = [t for i in ids for t in (self.expansion if i == self.image_token_id else [i])]
        return {"prompt_token_ids": ids}

    def apply_model(self, func):
        self.events.append(("apply_model",))
        return [func(self.model)]

    def reset_prefix_cache(self):
        self.events.append(("reset_prefix_cache",))

    def sleep(self, level=1):
        self.events.append(("sleep", level))

    def wake_up(self, tags=None):
        self.events.append(("wake_up", tuple(tags)))


def fake_generator(tokenizer, llm=None, **kwargs):
    lora_cls = kwargs.pop("lora_request_cls", None)
    return vb.VLLMGenerator(
        llm or FakeLLM(), tokenizer, dict, lora_request_cls=lora_cls, **kwargs
    )  # dict stands in for vllm.SamplingParams: the kwargs are what is checked


def test_sampling_kwargs_per_request():
    p = SamplingParams(max_new_tokens=9, temperature=0.7, top_p=0.9, stop=["</calc>"], seed=4)
    a, b = vb.sampling_kwargs(p, 11), vb.sampling_kwargs(p, 12)
    assert a["max_tokens"] == 9 and a["temperature"] == 0.7 and a["top_p"] == 0.9
    assert a["stop"] == ["</calc>"] and a["include_stop_str_in_output"] is True
    assert a["logprobs"] == 0 and a["skip_special_tokens"] is False and a["n"] == 1
    assert (a["seed"], b["seed"]) == (11, 12)  # the row key is the request's seed
    assert vb.sampling_kwargs(p, 2**62 + 5)["seed"] == (2**62 + 5) % (2**31 - 1)  # vLLM's range
    assert "bad_words" not in a  # a text-only model bans nothing
    greedy = vb.sampling_kwargs(SamplingParams(temperature=0.0, top_p=0.5, seed=4), 11)
    assert greedy["temperature"] == 0.0 and greedy["top_p"] == 1.0 and greedy["seed"] is None
    assert vb.sampling_kwargs(SamplingParams(), None)["seed"] is None  # unseeded stays so


def test_a_requests_seed_is_its_row_key_whatever_shares_the_call(tokenizer):
    """Requests with a seed of their own (the rollout actor's: episode and turn) get the same
    vLLM seed alone, with others or reordered; requests that share a seed (a group) get
    different seeds, told apart by their order among them."""
    llm = FakeLLM(replies=[out([5], [-1.0])] * 9)
    gen = fake_generator(tokenizer, llm)
    own = [SamplingParams(max_new_tokens=1, seed=s) for s in (101, 102, 103)]
    gen.generate([[1], [2], [3]], own)
    gen.generate([[3], [1]], [own[2], own[0]])
    gen.generate([[2, 2]] * 4, SamplingParams(max_new_tokens=1, seed=7))
    first, second, group = ([request["seed"] for request in call["sampling"]] for call in llm.calls)
    assert second == [first[2], first[0]]
    assert len(set(group)) == 4 and not set(group) & set(first)


def test_output_conversion(tokenizer):
    ids = tokenizer("<calc>1+1</calc>")["input_ids"]
    lps = [-0.5 - i for i in range(len(ids))]
    c = vb.to_completion(out(ids, lps, "stop", "</calc>", extra=0), tokenizer)
    assert c.token_ids == ids and c.logprobs == lps and c.finish_reason == "stop"
    assert c.text == tokenizer.decode(ids, skip_special_tokens=False)
    assert vb.finish_reason(out([1], [0.0], "stop", None)) == "eos"
    assert vb.finish_reason(out([1], [0.0], "stop", 2)) == "eos"  # a stop token id
    assert vb.finish_reason(out([1], [0.0], "length")) == "length"
    with pytest.raises(RuntimeError, match="abort"):
        vb.finish_reason(out([1], [0.0], "abort"))
    missing = SimpleNamespace(token_ids=[1, 2], logprobs=None)
    with pytest.raises(RuntimeError, match="logprobs=0"):
        vb.sampled_logprobs(missing)


def test_generate_builds_token_prompts_and_keeps_order(tokenizer):
    llm = FakeLLM(replies=[out([5, 6], [-1.0, -2.0]), out([7], [-3.0], "stop", "</s>")])
    gen = fake_generator(tokenizer, llm)
    params = [SamplingParams(max_new_tokens=2, seed=1), SamplingParams(max_new_tokens=5, seed=1)]
    done = gen.generate([[1, 2, 3], [4]], params)
    call = llm.calls[0]
    assert call["prompts"] == [{"prompt_token_ids": [1, 2, 3]}, {"prompt_token_ids": [4]}]
    assert [s["max_tokens"] for s in call["sampling"]] == [2, 5]
    assert call["lora"] is None
    assert [c.token_ids for c in done] == [[5, 6], [7]]
    assert [c.finish_reason for c in done] == ["length", "stop"]
    assert (gen.calls, gen.prompt_tokens, gen.generated_tokens, gen.reused_tokens) == (1, 4, 3, 6)
    with pytest.raises(ValueError, match="empty prompt"):
        gen.generate([[]], SamplingParams())
    with pytest.raises(ValueError, match="sampling params"):
        gen.generate([[1], [2]], [SamplingParams()])


# ---------------------------------------------------------------------------------------------
# Images (a vision-language policy): the tiny grafted Idefics3 of tests/conftest.py
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vlm_tok(tiny_vlm_dir):
    return load_tokenizer(ModelConfig(name=str(tiny_vlm_dir)))


@pytest.fixture
def pictures(tmp_path):
    """Three 32 x 32 pictures, each with its own colour and one odd pixel (orientation)."""
    refs, images = [], []
    for colour in ((255, 0, 0), (0, 0, 255), (0, 200, 0)):
        image = Image.new("RGB", (32, 32), colour)
        image.putpixel((3, 1), (7, 8, 9))
        refs.append(save_image(image, tmp_path))
        images.append(image)
    return refs, images


def vlm_prompt(tok, n_images: int, text: str = "What colour?") -> list[int]:
    return encode_prompt(
        tok,
        [{"role": "user", "content": text + spec_of_dir(tok.name_or_path).placeholder * n_images}],
    )


def vlm_llm(tok, replies=(), expansion=None):
    """A stand-in engine that expands `<image>` as vLLM would for this model directory."""
    spec = spec_of_dir(tok.name_or_path)
    placeholder = vb.placeholder_ids(spec, tok)
    return FakeLLM(
        replies=list(replies),
        image_token_id=spec.image_token_id,
        expansion=placeholder if expansion is None else expansion,
    )


def same_pixels(sent, written) -> bool:
    return sent.size == written.size and np.array_equal(np.asarray(sent), np.asarray(written))


def test_image_prompts_carry_their_pictures_in_placeholder_order(vlm_tok, pictures):
    """Pictures go into the request's multi_modal_data in placeholder order, each expanded
    placeholder collapsed to the `<image>` token vLLM expands; text prompts stay plain token
    prompts; a mixed call keeps its order."""
    (red, blue, green), (red_im, blue_im, green_im) = pictures
    tok = vlm_tok
    spec = spec_of_dir(tok.name_or_path)
    two, text, one = vlm_prompt(tok, 2), vlm_prompt(tok, 0), vlm_prompt(tok, 1, "And now?")
    replies = [out([5], [-1.0]), out([6, 7], [-2.0, -3.0]), out([8], [-4.0])]
    llm = vlm_llm(tok, replies)
    gen = fake_generator(tok, llm)
    done = gen.generate(
        [two, text, one],
        SamplingParams(max_new_tokens=2, seed=0),
        images=[[blue, red], [], [green]],
    )
    first, plain, third = llm.calls[0]["prompts"]
    assert plain == {"prompt_token_ids": text}
    for request, prompt, written in ((first, two, [blue_im, red_im]), (third, one, [green_im])):
        assert request.keys() == {"prompt_token_ids", "multi_modal_data"}
        sent = request["multi_modal_data"]["image"]
        assert len(sent) == len(written)
        assert all(same_pixels(a, b) for a, b in zip(sent, written, strict=True))
        ids = request["prompt_token_ids"]  # one `<image>` per picture, nothing else changed
        assert ids.count(spec.image_token_id) == len(written)
        assert len(ids) == len(prompt) - len(written) * (len(vb.placeholder_ids(spec, tok)) - 1)
        wrappers = {tok.convert_tokens_to_ids(t) for t in VISION_TOKENS if t != IMAGE_TOKEN}
        assert not wrappers & set(ids)
        expanded = llm._seen(request)["prompt_token_ids"]
        assert expanded == prompt  # vLLM's expansion gives back the rollout's tokens
    assert [c.token_ids for c in done] == [[5], [6, 7], [8]]
    assert gen.prompt_tokens == len(two) + len(text) + len(one)  # the rollout's token counts
    banned = [s["bad_words"] for s in llm.calls[0]["sampling"]]
    assert banned == [list(VISION_TOKENS)] * 3  # a VLM never samples its placeholders
    llm.replies.append(out([1], [0.0]))
    gen.generate([text], SamplingParams(max_new_tokens=1))  # no images: a plain token prompt
    assert llm.calls[1]["prompts"] == [{"prompt_token_ids": text}]


def test_a_changed_image_file_fails_before_the_engine_runs(vlm_tok, pictures):
    (red, _, _), _ = pictures
    Image.new("RGB", (32, 32), (1, 2, 3)).save(red.path, format="PNG")  # same path, new bytes
    llm = vlm_llm(vlm_tok)
    gen = fake_generator(vlm_tok, llm)
    with pytest.raises(ImageError, match="changed since it was shown"):
        gen.generate([vlm_prompt(vlm_tok, 1)], SamplingParams(), images=[[red]])
    assert llm.calls == []


def test_image_counts_must_match(vlm_tok, tokenizer, pictures):
    (red, blue, _), _ = pictures
    gen = fake_generator(vlm_tok, vlm_llm(vlm_tok), max_images_per_prompt=1)
    one = vlm_prompt(vlm_tok, 1)
    with pytest.raises(ValueError, match="2 prompts but 1 image lists"):
        gen.generate([one, one], SamplingParams(), images=[[red]])
    with pytest.raises(ValueError, match="prompt 0: 1 image placeholders for 2 images"):
        gen.generate([one], SamplingParams(), images=[[red, blue]])
    with pytest.raises(ValueError, match="prompt 1: 1 image placeholders for 0 images"):
        gen.generate([one, one], SamplingParams(), images=[[red], []])
    with pytest.raises(ValueError, match="1 image placeholders for 0 images"):
        gen.generate([one], SamplingParams())  # placeholders, but no pictures given
    stray = one + [spec_of_dir(vlm_tok.name_or_path).image_token_id]
    with pytest.raises(ValueError, match="outside a whole image placeholder"):
        gen.generate([stray], SamplingParams(), images=[[red]])
    with pytest.raises(ValueError, match=r"at most 1 per prompt: raise vllm\.max_images"):
        gen.generate([vlm_prompt(vlm_tok, 2)], SamplingParams(), images=[[red, blue]])
    text_only = fake_generator(tokenizer)
    with pytest.raises(ValueError, match="not a vision-language model"):
        text_only.generate([[1, 2]], SamplingParams(), images=[[red]])
    assert not gen.llm.calls and not text_only.llm.calls


def test_an_engine_that_expands_pictures_differently_fails_loudly(vlm_tok, pictures):
    """vLLM's processor writes the placeholders back from the model directory's processor
    config; if that is not the chat format's (another image_seq_len), the engine's context
    would not be the learner's."""
    (red, _, _), _ = pictures
    spec = spec_of_dir(vlm_tok.name_or_path)
    wrong = vb.placeholder_ids(spec, vlm_tok) + [spec.image_token_id]  # one token too many
    gen = fake_generator(vlm_tok, vlm_llm(vlm_tok, [out([5], [-1.0])], expansion=wrong))
    with pytest.raises(RuntimeError, match="expanded its image placeholders"):
        gen.generate([vlm_prompt(vlm_tok, 1)], SamplingParams(), images=[[red]])


def test_collapse_placeholders():
    placeholder, image = [10, 11, 12, 12, 10], 12
    ids = [1, 10, 11, 12, 12, 10, 2, 10, 11, 12, 12, 10]
    assert vb.collapse_placeholders(ids, placeholder, image) == ([1, 12, 2, 12], 2)
    assert vb.collapse_placeholders([1, 10, 2], placeholder, image) == ([1, 10, 2], 0)
    with pytest.raises(ValueError, match="position 3"):
        vb.collapse_placeholders([1, 10, 11, 12, 10], placeholder, image)  # a cut placeholder


def test_engine_kwargs_limit_images_only_for_a_vision_model(tiny_vlm_dir):
    name = str(tiny_vlm_dir)
    cfg = load_config(
        None, [f"model.name={name}", "rollout.backend=vllm", "vllm.max_images_per_prompt=3"]
    )
    assert vb.engine_kwargs(cfg, name)["limit_mm_per_prompt"] == {"image": 3}
    text = load_config(None, ["rollout.backend=vllm"])
    assert "limit_mm_per_prompt" not in vb.engine_kwargs(text, "/m")
    cfg.vllm.max_images_per_prompt = 0  # past validation (e.g. a changed directory)
    with pytest.raises(ModelLoadError, match="vllm.max_images_per_prompt"):
        vb.engine_kwargs(cfg, name)


def test_vision_model_on_vllm_needs_an_image_limit(tiny_vlm_dir):
    with pytest.raises(ConfigError, match="set vllm.max_images_per_prompt"):
        load_config(None, [f"model.name={tiny_vlm_dir}", "rollout.backend=vllm"])
    cfg = load_config(
        None,
        ["model.name=smollm2-135m-vision", "rollout.backend=vllm", "vllm.max_images_per_prompt=4"],
    )
    assert cfg.vllm.max_images_per_prompt == 4


def test_qwen2_vl_pictures_are_refused_on_vllm(tiny_qwen2_vl_dir):
    """Image inputs on vLLM are built for Idefics3 placeholders only: a Qwen2-VL policy is a
    load-time error that names the hf backend, and the generator refuses it too."""
    name = str(tiny_qwen2_vl_dir)
    with pytest.raises(ConfigError, match="qwen2_vl model: rollout.backend=vllm"):
        load_config(
            None, [f"model.name={name}", "rollout.backend=vllm", "vllm.max_images_per_prompt=2"]
        )
    assert model_load.vision_family(name) == "qwen2_vl"
    assert model_load.vision_family(model_load.GRAFTED_NAME) == "idefics3"
    tok = load_tokenizer(ModelConfig(name=name))
    with pytest.raises(ModelLoadError, match="rollout.backend=hf"):
        fake_generator(tok)


def test_takes_images_reads_only_the_name_or_config(tiny_vlm_dir, tmp_path):
    assert model_load.takes_images(model_load.GRAFTED_NAME) is True
    assert model_load.takes_images(str(tiny_vlm_dir)) is True
    assert model_load.takes_images(model_load.BUNDLED_NAME) is False
    assert model_load.takes_images(model_load.TINY_NAME) is False
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    assert model_load.takes_images(str(tmp_path)) is False
    assert model_load.takes_images("/no/such/dir") is None


def test_full_weight_sync_loads_every_tensor_and_resets_the_prefix_cache(tokenizer, tiny):
    llm = FakeLLM()
    gen = fake_generator(tokenizer, llm, sleep_level=2)
    release_for_update(gen)
    assert llm.events == [("sleep", 2)]
    sync_weights(gen, tiny)  # the generator holds its own copy: the state dict is sent
    loaded = dict(llm.model.loaded[0])
    assert loaded.keys() == tiny.state_dict().keys()
    for name, tensor in tiny.state_dict().items():
        assert torch.equal(loaded[name], tensor)
    # level 2: weight memory back, weights in, then the KV cache, then no stale prefix blocks
    assert llm.events[1:] == [
        ("wake_up", ("weights",)),
        ("apply_model",),
        ("wake_up", ("kv_cache",)),
        ("reset_prefix_cache",),
    ]
    with pytest.raises(ValueError, match="holds its own weights"):
        gen.update_weights(None)


def test_skipped_update_sends_nothing_but_wakes(tokenizer, tiny):
    llm = FakeLLM()
    gen = fake_generator(tokenizer, llm, sleep_level=1)
    release_for_update(gen)
    sync_weights(gen, tiny, updated=False)
    assert llm.events == [("sleep", 1), ("wake_up", ("weights", "kv_cache"))]
    assert not llm.model.loaded


def test_no_sleep_without_sleep_level(tokenizer):
    llm = FakeLLM()
    release_for_update(fake_generator(tokenizer, llm))
    assert llm.events == []


def test_lora_sync_sends_the_adapter_only_under_a_new_id(tokenizer, tmp_path):
    pytest.importorskip("peft")
    policy, _ = load_policy(ModelConfig(name="tiny", lora_rank=4, lora_alpha=8.0))
    lora_cls = lambda name, i, path: SimpleNamespace(name=name, id=i, path=path)  # noqa: E731
    llm = FakeLLM(replies=[out([5], [-1.0]), out([6], [-1.0])])
    gen = fake_generator(tokenizer, llm, lora_request_cls=lora_cls, scratch_dir=tmp_path)
    gen.generate([[1, 2]], SamplingParams(max_new_tokens=1))
    assert llm.calls[0]["lora"] is None  # before any update: the base model (B = 0)
    sync_weights(gen, policy)
    first = gen._lora
    files = sorted(p.name for p in (tmp_path / "adapter_000001").iterdir())
    assert files == ["adapter_config.json", "adapter_model.safetensors"]
    assert (first.id, first.path) == (1, str(tmp_path / "adapter_000001"))
    assert not llm.model.loaded  # no full weights travelled
    gen.generate([[1, 2]], SamplingParams(max_new_tokens=1))
    assert llm.calls[1]["lora"] is first  # sampling runs through the synced adapter
    sync_weights(gen, policy)
    assert gen._lora.id == 2 and ("remove", 1) in llm.events  # the used adapter is dropped
    assert not (tmp_path / "adapter_000001").exists() and (tmp_path / "adapter_000002").exists()
    sync_weights(gen, policy)  # adapter 2 was never used: nothing to remove in the engine
    assert gen._lora.id == 3 and ("remove", 2) not in llm.events
    assert llm.events.count(("reset_prefix_cache",)) == 3
    no_lora = fake_generator(tokenizer, FakeLLM())
    with pytest.raises(RuntimeError, match="without LoRA"):
        no_lora.update_adapter(policy)


def test_engine_kwargs_follow_the_config():
    cfg = load_config(
        None,
        [
            "model.name=tiny",
            "rollout.backend=vllm",
            "vllm.sleep_level=1",
            "vllm.max_model_len=2048",
            "model.lora_rank=12",
        ],
    )
    kw = vb.engine_kwargs(cfg, "/m")
    assert kw["enable_prefix_caching"] is True and kw["model"] == kw["tokenizer"] == "/m"
    assert kw["enable_sleep_mode"] is True and kw["max_model_len"] == 2048
    assert kw["enable_lora"] is True and kw["max_lora_rank"] == 16 and kw["max_loras"] == 1
    assert kw["logprobs_mode"] == "processed_logprobs"  # logprobs after temperature and top-p
    plain = vb.engine_kwargs(load_config(None, ["rollout.backend=vllm"]), "/m")
    assert "enable_lora" not in plain and "enable_sleep_mode" not in plain
    assert vb.lora_rank_bucket(8) == 8 and vb.lora_rank_bucket(9) == 16


def test_tiny_model_is_written_for_the_engine(tmp_path, tokenizer):
    from transformers import AutoModelForCausalLM

    cfg = load_config(None, ["model.name=tiny", "rollout.backend=vllm"])
    policy, tok = load_policy(cfg.model)
    path = vb.engine_model_dir(cfg, policy, tok, tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(path)
    for name, tensor in policy.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name
    assert (path / "tokenizer_config.json").is_file()


def test_missing_vllm_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ModelLoadError, match=r"agentic-rl\[vllm\]"):
        vb.import_vllm()
    cfg = load_config(None, ["model.name=tiny", "rollout.backend=vllm"])
    policy, tok = load_policy(cfg.model)
    with pytest.raises(ModelLoadError, match=r"agentic-rl\[vllm\]"):
        make_generator(cfg, policy, tok)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["rollout.backend=sglang"], "rollout.backend"),
        (["vllm.sleep_level=1"], "rollout.backend is not vllm"),
        (["rollout.backend=vllm", "vllm.sleep_level=3"], "sleep_level"),
        (["rollout.backend=vllm", "vllm.gpu_memory_utilization=0"], "gpu_memory_utilization"),
        (["rollout.backend=vllm", "vllm.dtype=int8"], "vllm.dtype"),
        (
            ["rollout.backend=vllm", "vllm.sleep_level=2", "model.lora_rank=4"],
            "sleep_level=1",
        ),
        (["vllm.max_images_per_prompt=2"], "rollout.backend is not vllm"),
        (["rollout.backend=vllm", "vllm.max_images_per_prompt=-1"], "must be >= 0"),
        (["rollout.backend=vllm", "vllm.max_images_per_prompt=2"], "text-only model"),
        (
            ["rollout.backend=vllm", "model.name=smollm2-135m-vision"],
            "set vllm.max_images_per_prompt",
        ),
    ],
)
def test_backend_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


@pytest.mark.gpu
@pytest.mark.slow
def test_real_engine_matches_hf_logprobs(tmp_path):
    """On a GPU with vLLM installed: the engine's behaviour logprobs agree with the learner's
    recomputation, and a weight sync changes what it samples."""
    pytest.importorskip("vllm")
    from agentic_rl.model.load import token_logprobs

    cfg = load_config(
        None,
        [
            "model.name=smollm2-135m",  # real head sizes (the tiny model's 8 is not supported)
            "rollout.backend=vllm",
            "vllm.dtype=float32",
            "vllm.gpu_memory_utilization=0.2",
            "vllm.enforce_eager=true",
        ],
    )
    policy, tok = load_policy(cfg.model)
    gen = make_generator(cfg, policy, tok)
    prompt = tok("What is 2 + 2?")["input_ids"]
    c = gen.generate([prompt], SamplingParams(max_new_tokens=8, seed=0))[0]
    ids = torch.tensor([prompt + c.token_ids])
    with torch.no_grad():
        lp, _, _ = token_logprobs(policy, ids, torch.ones_like(ids))
    torch.testing.assert_close(lp[0, len(prompt) :], torch.tensor(c.logprobs), atol=2e-3, rtol=0)
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(0.0)  # a uniform policy: every logprob becomes -log V
    sync_weights(gen, policy)
    c = gen.generate([prompt], SamplingParams(max_new_tokens=4, seed=0))[0]
    expected = -torch.log(torch.tensor(float(policy.config.vocab_size)))
    torch.testing.assert_close(torch.tensor(c.logprobs), expected.expand(4), atol=1e-3, rtol=0)
