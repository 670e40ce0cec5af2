"""TransformersLLM on the real SmolLM2-135M: greedy decoding, stops, accounting, KV sessions.

A tiny random model runs the session checks in a fraction of a second as well. The reference for "plain generation" is both our own uncached path (``generate_ids``) and
transformers' ``model.generate`` on the same token ids, so the session machinery is checked
against an implementation it does not share code with.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from realmodels import load_or_skip
from tiny_model import tiny_transformers_llm
import torch

from nlqo.runtime.llm.base import LLM, ChatMessage

real_model = pytest.mark.real_model

SYSTEM = (
    "You answer geography questions with one short sentence.\n"
    "Example question: What is the capital of Italy?\nExample answer: The capital of Italy is Rome.\n"
    "Example question: What is the capital of Japan?\nExample answer: The capital of Japan is Tokyo."
)


def user_turn(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="session")
def llm():
    from nlqo.runtime.models import load_transformers

    return load_or_skip(lambda: load_transformers("smollm2-135m", progress=False))


@pytest.fixture
def fresh(llm):
    """The shared model with an empty prefix cache."""
    llm.clear_prefix_cache()
    return llm


@pytest.fixture(scope="session")
def prefix(llm) -> str:
    return llm.format_chat([ChatMessage("system", SYSTEM)], add_generation_prompt=False)


def hf_greedy(llm, ids, max_new_tokens: int) -> list[int]:
    """transformers' own greedy generation on exactly ``ids``, without any cache reuse."""
    with torch.inference_mode():
        out = llm.model.generate(
            torch.tensor([list(ids)]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=sorted(llm._eos),
            pad_token_id=llm.tokenizer.eos_token_id,
        )
    return out[0, len(ids) :].tolist()


@real_model
def test_loads_as_an_llm_and_answers_from_the_chat_template(llm):
    assert isinstance(llm, LLM) and llm.name == "smollm2-135m"
    messages = [ChatMessage("user", "What is the capital of France?")]
    out = llm.chat(messages, max_tokens=16)
    assert "Paris" in out.text
    assert out.finish_reason == "stop"  # ended with <|im_end|>, which is not in the text
    assert "<|im_end|>" not in out.text
    assert out.usage.prompt_tokens == len(llm.encode(llm.format_chat(messages)))
    assert out.usage.calls == 1 and out.usage.cached_prompt_tokens == 0


@real_model
def test_greedy_generation_is_deterministic_and_matches_transformers(fresh):
    prompt = "The three largest cities of Germany are"
    first, ids1 = fresh.generate_ids(fresh.encode(prompt, special=True), max_tokens=6)
    second, ids2 = fresh.generate_ids(fresh.encode(prompt, special=True), max_tokens=6)
    assert ids1 == ids2 and first.text == second.text and first.text.strip()
    assert list(ids1) == hf_greedy(fresh, fresh.encode(prompt, special=True), 6)


@real_model
def test_stop_strings_cut_the_text_and_end_generation(fresh):
    prompt = "Here is a list of European capitals: Paris, Berlin,"
    free = fresh.complete(prompt, max_tokens=12)
    words = free.text.split(" ")
    assert len(words) >= 4, free.text
    stop = " " + words[2]
    expected = free.text[: free.text.find(stop)]
    stopped = fresh.complete(prompt, stop=[stop, "@@never@@"], max_tokens=12)
    assert stopped.text == expected
    assert stopped.finish_reason == "stop"
    assert stopped.usage.generated_tokens < free.usage.generated_tokens


@real_model
def test_usage_counts_tokens_and_max_tokens_ends_with_length(fresh):
    prompt = "Once upon a time"
    before = fresh.total
    out, generated = fresh.generate_ids(fresh.encode(prompt, special=True), max_tokens=4)
    assert out.finish_reason == "length" and len(generated) == 4
    assert out.usage.prompt_tokens == len(fresh.encode(prompt, special=True))
    assert out.usage.generated_tokens == 4 and out.usage.cached_prompt_tokens == 0 and out.usage.calls == 1
    assert out.usage.wall_ms > 0
    assert fresh.total == before + out.usage
    empty = fresh.complete(prompt, max_tokens=0)
    assert (empty.text, empty.usage.generated_tokens, empty.finish_reason) == ("", 0, "length")


@real_model
def test_session_output_is_token_identical_to_plain_generation(fresh, prefix):
    session = fresh.session(prefix)
    prefix_ids = session.token_ids
    question = session.append(user_turn("What is the capital of Spain?"))
    context1 = session.token_ids
    out1 = session.generate(stop=["\n"], max_tokens=12)
    gen1 = session.token_ids[len(context1) :]
    assert len(gen1) == out1.usage.generated_tokens
    plain1, plain_gen1 = fresh.generate_ids(context1, stop=["\n"], max_tokens=12)
    assert gen1 == plain_gen1 and out1.text == plain1.text
    assert list(gen1) == hf_greedy(fresh, context1, len(gen1))

    follow = session.append("\n" + user_turn("And the capital of Portugal?"))
    context2 = session.token_ids
    assert context2 == prefix_ids + question + gen1 + follow  # segments tokenized separately
    out2 = session.generate(stop=["\n"], max_tokens=12)
    gen2 = session.token_ids[len(context2) :]
    plain2, plain_gen2 = fresh.generate_ids(context2, stop=["\n"], max_tokens=12)
    assert gen2 == plain_gen2 and out2.text == plain2.text
    assert list(gen2) == hf_greedy(fresh, context2, len(gen2))
    # the second step computed only the new tokens (and the last generated one, never fed before)
    assert out2.usage.prompt_tokens == len(context2)
    assert out2.usage.cached_prompt_tokens == len(context1) + len(gen1) - 1
    assert session.usage == out1.usage + out2.usage


@real_model
def test_a_second_session_reuses_the_prefix_and_saves_its_tokens(fresh, prefix):
    n_prefix = len(fresh.encode(prefix, special=True))
    first = fresh.session(prefix)
    first.append(user_turn("What is the capital of Spain?"))
    a = first.generate(stop=["\n"], max_tokens=12)
    assert a.usage.cached_prompt_tokens == 0
    assert fresh.cached_prefixes() == (n_prefix,)

    second = fresh.session(prefix)
    second.append(user_turn("What is the capital of Canada?"))
    context = second.token_ids
    b = second.generate(stop=["\n"], max_tokens=12)
    assert b.usage.cached_prompt_tokens == n_prefix
    assert b.usage.computed_prompt_tokens == len(context) - n_prefix
    plain, plain_gen = fresh.generate_ids(context, stop=["\n"], max_tokens=12)
    assert b.text == plain.text and second.token_ids[len(context) :] == plain_gen
    assert plain.usage.computed_prompt_tokens - b.usage.computed_prompt_tokens == n_prefix


@real_model
def test_forks_are_independent(fresh, prefix):
    base = fresh.session(prefix)
    base.append(user_turn("Name a river in France."))
    base.generate(stop=["\n"], max_tokens=8)
    at_fork = base.token_ids

    child = base.fork()
    child_added = child.append("\n" + user_turn("Name a mountain in Italy."))
    child_out = child.generate(stop=["\n"], max_tokens=8)
    base_added = base.append("\n" + user_turn("Name a lake in Switzerland."))
    base_out = base.generate(stop=["\n"], max_tokens=8)

    assert child.token_ids[: len(at_fork)] == base.token_ids[: len(at_fork)] == at_fork
    assert child.token_ids[len(at_fork) :][: len(child_added)] == child_added
    assert base.token_ids[len(at_fork) :][: len(base_added)] == base_added
    for session, out, added in ((child, child_out, child_added), (base, base_out, base_added)):
        context = at_fork + added
        plain, plain_gen = fresh.generate_ids(context, stop=["\n"], max_tokens=8)
        assert out.text == plain.text and session.token_ids[len(context) :] == plain_gen
        assert out.usage.cached_prompt_tokens == len(at_fork) - 1
    assert child.usage == child_out.usage  # a fork accounts only for its own calls


@real_model
def test_truncate_rolls_a_session_back(fresh, prefix):
    session = fresh.session(prefix)
    session.append(user_turn("What is the capital of Norway?"))
    mark = len(session)
    first = session.generate(stop=["\n"], max_tokens=8)
    session.truncate(mark)
    assert len(session) == mark and session.cached_tokens == mark - 1
    again = session.generate(stop=["\n"], max_tokens=8)
    assert again.text == first.text
    assert again.usage.cached_prompt_tokens == mark - 1 and again.usage.computed_prompt_tokens == 1


@real_model
def test_complete_can_reuse_a_cached_prefix(fresh):
    shared = "Answer with one word.\n" * 6
    a = fresh.complete(shared + "Q: The colour of the sky?\nA:", max_tokens=3, prefix_cache=True)
    b = fresh.complete(shared + "Q: The colour of grass?\nA:", max_tokens=3, prefix_cache=True)
    ids_a = fresh.encode(shared + "Q: The colour of the sky?\nA:", special=True)
    ids_b = fresh.encode(shared + "Q: The colour of grass?\nA:", special=True)
    common = next(i for i, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y)
    assert a.usage.cached_prompt_tokens == 0
    assert b.usage.cached_prompt_tokens == common > 30
    assert b.text == fresh.complete(shared + "Q: The colour of grass?\nA:", max_tokens=3).text


@real_model
def test_a_fork_shares_the_weights_but_not_the_prefix_cache(fresh):
    shared = "Answer with one word.\n" * 6
    fresh.complete(shared + "Q: The colour of the sky?\nA:", max_tokens=2, prefix_cache=True)
    fork = fresh.fork()
    assert fork.model is fresh.model and fork._lock is fresh._lock
    assert fork.cached_prefixes() == () and len(fresh.cached_prefixes()) == 1
    first = fork.complete(shared + "Q: The colour of grass?\nA:", max_tokens=2, prefix_cache=True)
    again = fork.complete(shared + "Q: The colour of snow?\nA:", max_tokens=2, prefix_cache=True)
    assert first.usage.cached_prompt_tokens == 0 and again.usage.cached_prompt_tokens > 30
    assert len(fresh.cached_prefixes()) == 1 and len(fork.cached_prefixes()) == 2


@real_model
def test_one_model_serves_a_thread_pool(fresh):
    prompts = ["The sun is", "Water boils at", "The moon is", "Cats like to"]
    sequential = [fresh.complete(p, max_tokens=4).text for p in prompts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = list(pool.map(lambda p: fresh.complete(p, max_tokens=4).text, prompts))
    assert parallel == sequential
    assert fresh.concurrency == 1


# --- the same session properties on a tiny random model (fast) -----------------------------------


@pytest.fixture(scope="module")
def tiny():
    return tiny_transformers_llm()


def test_tiny_session_steps_equal_plain_and_transformers_generation(tiny):
    tiny.clear_prefix_cache()
    prefix = " ".join(f"w{i % 61}" for i in range(40))
    for turn, question in enumerate(["w3 w5 w7", "w11 w13"]):
        session = tiny.session(prefix)
        session.append(question)
        context = session.token_ids
        out = session.generate(max_tokens=6)
        generated = session.token_ids[len(context) :]
        plain, plain_generated = tiny.generate_ids(context, max_tokens=6)
        assert generated == plain_generated and out.text == plain.text
        assert list(generated) == hf_greedy(tiny, context, len(generated))
        assert out.usage.cached_prompt_tokens == (0 if turn == 0 else len(tiny.encode(prefix)))
        branch = session.fork()
        branch.append("w17 w19")
        session.append("w23")
        for s in (branch, session):
            before = s.token_ids
            s.generate(max_tokens=4)
            assert s.token_ids[len(before) :] == tiny.generate_ids(before, max_tokens=4)[1]


class _Vocab:
    """Just enough of a tokenizer for ``_end_tokens``."""

    eos_token_id = None

    def __init__(self, vocab: dict[str, int], special: list[str]):
        self._vocab, self.all_special_tokens = vocab, special

    def get_vocab(self) -> dict[str, int]:
        return self._vocab


def test_generation_also_ends_at_the_vocabularys_end_of_turn_specials():
    from types import SimpleNamespace

    from nlqo.runtime.llm.local import _end_tokens

    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=7))
    vocab = {"<|im_end|>": 7, "<|endoftext|>": 3, "<|end|>": 9, "hello": 1}
    # Qwen's config names only <|im_end|>; <|endoftext|> is special and ends the turn too.
    # "<|end|>" is an ordinary token in this vocabulary, so it must not stop generation.
    assert _end_tokens(model, _Vocab(vocab, ["<|im_end|>", "<|endoftext|>"])) == {7, 3}
    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=[7, 8]))
    assert _end_tokens(model, _Vocab({"hello": 1}, [])) == {7, 8}


def test_an_unknown_quantization_is_named_in_the_error(tiny):
    from nlqo.runtime.llm.local import quantized

    with pytest.raises(ValueError, match="unknown quantization 'int4'; choose one of none, int8"):
        quantized(tiny.model, "int4")
    assert quantized(tiny.model, "none") is tiny.model


@real_model
def test_int8_quantization_swaps_every_linear_layer_and_still_answers(llm):
    from nlqo.runtime.models import load_transformers

    q = load_transformers("smollm2-135m", quantize="int8", progress=False)
    assert not any(type(m) is torch.nn.Linear for m in q.model.modules())
    assert sum(1 for m in q.model.modules() if type(m).__module__.startswith("torch.ao.nn.quantized")) >= 30 * 7
    turn = q.format_chat([ChatMessage("system", SYSTEM), ChatMessage("user", "What is the capital of France?")])
    assert "Paris" in q.complete(turn, max_tokens=16).text
    again = q.complete(turn, max_tokens=16).text
    assert again == q.complete(turn, max_tokens=16).text  # still greedy and deterministic
