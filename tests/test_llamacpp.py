"""LlamaCppLLM on the real SmolLM2-135M GGUF: equivalence with plain runs and with transformers,
restored prefixes, batched decoding, stops, accounting, and clear errors for bad files.

"Plain" is the same backend with nothing reused (``prefix_cache=False``); transformers
(float32, the de-quantized copy of the same weights) is the reference implementation the
runtime must agree with on greedy answers.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from realmodels import load_or_skip

from nlqo.errors import ConfigError, LLMError, ModelNotAvailable
from nlqo.runtime.llm.base import LLM, ChatMessage

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (sh scripts/install-llama-cpp.sh)")
real_model = pytest.mark.real_model
pytestmark = real_model

SYSTEM = (
    "You answer geography questions with one short sentence.\n"
    "Example question: What is the capital of Italy?\nExample answer: The capital of Italy is Rome.\n"
    "Example question: What is the capital of Japan?\nExample answer: The capital of Japan is Tokyo."
)
QUESTIONS = [
    "What is the capital of Spain?",
    "What is the capital of Canada?",
    "Name a river in France.",
    "Where is Mount Fuji?",
]


def user_turn(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def llm():
    from nlqo.runtime.models import load_local

    return load_or_skip(lambda: load_local("smollm2-135m", runtime="llama-cpp", threads=2, progress=False))


@pytest.fixture
def fresh(llm):
    """A handle of its own: no saved prefixes, no slot affinity with earlier tests."""
    return llm.fork()


@pytest.fixture(scope="module")
def prefix(llm) -> str:
    return llm.format_chat([ChatMessage("system", SYSTEM)], add_generation_prompt=False)


def test_loads_the_bundled_gguf_and_answers_from_its_chat_template(llm):
    from nlqo.runtime.llm.llamacpp import LlamaCppLLM

    assert isinstance(llm, LlamaCppLLM) and isinstance(llm, LLM)
    assert llm.name == "smollm2-135m" and llm.threads == 2 and llm.concurrency >= 2
    out = llm.chat(
        [ChatMessage("system", SYSTEM), ChatMessage("user", "What is the capital of France?")], max_tokens=16
    )
    assert "Paris" in out.text
    assert out.usage.generated_tokens <= 16 and out.usage.calls == 1 and out.usage.wall_ms > 0


def test_greedy_answers_equal_the_transformers_float32_reference(llm):
    """The runtime must not change the model: same chat text, same tokens, same greedy answers."""
    from nlqo.runtime.models import load_transformers

    reference = load_transformers("smollm2-135m", progress=False)
    messages = [ChatMessage("system", SYSTEM), ChatMessage("user", QUESTIONS[0])]
    assert llm.format_chat(messages) == reference.format_chat(messages)
    text = reference.format_chat(messages)
    assert llm.encode(text) == reference.encode(text)
    for question in QUESTIONS:
        messages = [ChatMessage("system", SYSTEM), ChatMessage("user", question)]
        assert llm.chat(messages, max_tokens=16).text == reference.chat(messages, max_tokens=16).text


def test_stop_strings_cut_the_text_and_end_generation(fresh):
    long = fresh.complete("Count: one, two, three, four, five,", max_tokens=30)
    assert "," in long.text
    cut = fresh.complete("Count: one, two, three, four, five,", stop=[","], max_tokens=30)
    assert "," not in cut.text and long.text.startswith(cut.text)
    assert cut.finish_reason == "stop" and cut.usage.generated_tokens < long.usage.generated_tokens


def test_end_of_turn_tokens_end_generation(fresh):
    out = fresh.chat([ChatMessage("user", "Say hello.")], max_tokens=200)
    assert out.finish_reason == "stop" and out.usage.generated_tokens < 200
    assert "<|im_end|>" not in out.text and "<|im_start|>" not in out.text


def test_usage_counts_tokens_and_max_tokens_ends_with_length(fresh):
    prompt = "The history of the Roman Empire"
    out = fresh.complete(prompt, max_tokens=5)
    assert out.usage.prompt_tokens == len(fresh.encode(prompt, special=True))
    assert out.usage.cached_prompt_tokens == 0
    assert (out.usage.generated_tokens, out.finish_reason) == (5, "length")
    empty = fresh.complete(prompt, max_tokens=0)
    assert (empty.text, empty.usage.generated_tokens, empty.finish_reason) == ("", 0, "length")
    with pytest.raises(LLMError, match="empty"):
        fresh.generate_ids([], max_tokens=3)


def test_a_restored_scaffold_gives_the_tokens_of_a_plain_run(fresh, prefix):
    """The first session saves the prefix state; the next ones restore it and must answer as if
    everything had been computed from scratch."""
    n_prefix = len(fresh.encode(prefix, special=True))
    for turn, question in enumerate(QUESTIONS):
        fresh.runtime.forget(fresh._owner)  # no resident tokens to reuse: only the saved prefix state
        for _ in range(fresh.concurrency):  # and every slot overwritten by another handle's request
            fresh.fork().complete("Unrelated filler text about cooking pasta.", max_tokens=2)
        session = fresh.session(prefix)
        session.append(user_turn(question))
        context = session.token_ids
        out = session.generate(stop=["\n"], max_tokens=16)
        generated = session.token_ids[len(context) :]
        plain, plain_generated = fresh.fork().generate_ids(context, stop=["\n"], max_tokens=16)
        assert generated == plain_generated and out.text == plain.text
        assert out.usage.cached_prompt_tokens == (0 if turn == 0 else n_prefix)
    assert fresh.cached_prefixes() == (n_prefix,)


def test_session_steps_compute_only_what_was_appended(fresh, prefix):
    session = fresh.session(prefix)
    session.append(user_turn(QUESTIONS[0]))
    context1 = session.token_ids
    out1 = session.generate(stop=["\n"], max_tokens=12)
    gen1 = session.token_ids[len(context1) :]
    follow = session.append("\n" + user_turn(QUESTIONS[1]))
    context2 = session.token_ids
    assert context2 == context1 + gen1 + follow
    out2 = session.generate(stop=["\n"], max_tokens=12)
    plain2, plain_gen2 = fresh.fork().generate_ids(context2, stop=["\n"], max_tokens=12)
    assert session.token_ids[len(context2) :] == plain_gen2 and out2.text == plain2.text
    assert out2.usage.prompt_tokens == len(context2)
    assert out2.usage.cached_prompt_tokens == len(context1) + len(gen1) - 1
    assert session.usage == out1.usage + out2.usage


def test_forks_and_truncation_are_independent_of_each_other(fresh, prefix):
    base = fresh.session(prefix)
    base.append(user_turn(QUESTIONS[2]))
    base.generate(stop=["\n"], max_tokens=8)
    at_fork = base.token_ids
    child = base.fork()
    child_added = child.append("\n" + user_turn(QUESTIONS[3]))
    child_out = child.generate(stop=["\n"], max_tokens=8)
    base_added = base.append("\n" + user_turn(QUESTIONS[0]))
    base_out = base.generate(stop=["\n"], max_tokens=8)
    for session, out, added in ((child, child_out, child_added), (base, base_out, base_added)):
        context = at_fork + added
        plain, plain_gen = fresh.fork().generate_ids(context, stop=["\n"], max_tokens=8)
        assert out.text == plain.text and session.token_ids[len(context) :] == plain_gen
    mark = len(base) - len(base_out.text) - 1
    base.truncate(mark)
    again = base.generate(stop=["\n"], max_tokens=8)
    plain, _ = fresh.fork().generate_ids(base.token_ids[:mark], stop=["\n"], max_tokens=8)
    assert again.text == plain.text and again.usage.cached_prompt_tokens == mark - 1


def test_batched_generation_equals_sequential_generation(fresh):
    """Requests from several threads are decoded together in one batch; greedy outputs must be
    the ones each request gives alone, token for token."""
    prompts = [user_turn(q) for q in QUESTIONS]
    sequential = [fresh.fork().generate_ids(fresh.encode(p, special=True), max_tokens=24)[1] for p in prompts]
    seen = []
    runtime = fresh.runtime
    original = runtime._decode_step

    def spy(requests):
        seen.append(len(requests))
        return original(requests)

    runtime._decode_step = spy
    try:
        start = threading.Barrier(len(prompts))

        def run(prompt):
            start.wait()
            return fresh.fork().generate_ids(fresh.encode(prompt, special=True), max_tokens=24)[1]

        with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
            batched = list(pool.map(run, prompts))
    finally:
        del runtime._decode_step
    assert batched == sequential
    assert max(seen) >= 2, "the requests were never decoded in one batch"


def test_complete_reuses_a_saved_prefix_only_when_asked(fresh):
    shared = "Answer with one word.\n" * 6
    ask = lambda q, **kw: fresh.complete(shared + f"Q: {q}\nA:", max_tokens=3, **kw)  # noqa: E731
    a = ask("The colour of the sky?", prefix_cache=True)
    b = ask("The colour of grass?", prefix_cache=True)
    c = ask("The colour of grass?")
    ids_a = fresh.encode(shared + "Q: The colour of the sky?\nA:", special=True)
    ids_b = fresh.encode(shared + "Q: The colour of grass?\nA:", special=True)
    common = next(i for i, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y)
    assert a.usage.cached_prompt_tokens == 0 and c.usage.cached_prompt_tokens == 0
    assert b.usage.cached_prompt_tokens == common > 30
    assert b.text == c.text


def test_forks_keep_their_own_saved_prefixes(fresh):
    shared = "Answer with one word.\n" * 6
    fresh.complete(shared + "Q: The colour of the sky?\nA:", max_tokens=2, prefix_cache=True)
    fork = fresh.fork()
    assert fork.runtime is fresh.runtime
    assert fork.cached_prefixes() == () and len(fresh.cached_prefixes()) == 1
    first = fork.complete(shared + "Q: The colour of grass?\nA:", max_tokens=2, prefix_cache=True)
    again = fork.complete(shared + "Q: The colour of snow?\nA:", max_tokens=2, prefix_cache=True)
    assert first.usage.cached_prompt_tokens == 0 and again.usage.cached_prompt_tokens > 30


def test_chat_saves_its_scaffold_so_other_prompts_cannot_push_it_out(fresh):
    """A chat prompt keeps the state of what precedes its last message's text (system prompt,
    demonstrations): prompts of another kind, however many, add one saved prefix, not one each."""
    demo = [
        ChatMessage("system", SYSTEM),
        ChatMessage("user", "What is the capital of Italy?"),
        ChatMessage("assistant", "Rome."),
    ]
    first = [*demo, ChatMessage("user", QUESTIONS[0])]
    fresh.chat(first, max_tokens=2, prefix_cache=True)
    scaffold = fresh.scaffold_length(first, fresh.encode(fresh.format_chat(first)))
    assert fresh.cached_prefixes() == (scaffold,) and scaffold > 60
    for i in range(2 * fresh.prefix_cache_size):
        fresh.chat(
            [ChatMessage("system", "You name a colour."), ChatMessage("user", f"Colour number {i}?")],
            max_tokens=2,
            prefix_cache=True,
        )
    assert len(fresh.cached_prefixes()) == 2
    fresh.runtime.forget(fresh._owner)  # nothing resident: only a saved prefix can serve
    later = [*demo, ChatMessage("user", QUESTIONS[1])]
    again = fresh.chat(later, max_tokens=8, prefix_cache=True)
    plain = fresh.fork().chat(later, max_tokens=8)
    assert again.usage.cached_prompt_tokens == scaffold and again.text == plain.text


def test_the_linear_template_serves_most_prompt_tokens_from_the_restored_scaffold(llm):
    """TSSS's point: the scaffold is computed once; later questions restore it."""
    from fakes import PASSAGES, HashEmbedder, KeywordRetriever

    from nlqo.execution.linear import LinearExecutor

    retriever = KeywordRetriever(PASSAGES)
    executor = LinearExecutor(llm.fork(), retriever, HashEmbedder(), k=2, max_hops=2)
    executor.run("Who directed Jaws?")
    second = executor.run("Where was the director of Jaws born?")
    stats = second.stats()
    assert stats["llm_calls"] >= 2 and stats["prompt_tokens"] > 0
    assert stats["cached_prompt_tokens"] / stats["prompt_tokens"] >= 0.6


def test_a_missing_or_corrupt_gguf_is_named_in_the_error(tmp_path):
    from nlqo.runtime.llm.llamacpp import LlamaCppLLM

    missing = tmp_path / "absent.gguf"
    with pytest.raises(ModelNotAvailable, match="absent.gguf"):
        LlamaCppLLM.load(missing)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all" * 10)
    with pytest.raises(ModelNotAvailable, match="junk.gguf.*not a GGUF"):
        LlamaCppLLM.load(junk)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 40)
    with pytest.raises(ModelNotAvailable, match="truncated.gguf"):
        LlamaCppLLM.load(truncated)


def test_runtime_choice_is_explicit_about_what_cannot_run(tmp_path):
    from nlqo.runtime.models import choose_runtime

    assert choose_runtime("smollm2-135m", progress=False)[0] == "llama-cpp"
    assert choose_runtime("smollm2-135m", "transformers", progress=False) == ("transformers", None)
    assert choose_runtime("smollm2-135m", quantize="int8", progress=False) == ("transformers", None)
    with pytest.raises(ConfigError, match="transformers option"):
        choose_runtime("smollm2-135m", "llama-cpp", quantize="int8", progress=False)
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="needs a GGUF"):
        choose_runtime(str(folder), "llama-cpp", progress=False)
    with pytest.raises(ConfigError, match="unknown runtime"):
        choose_runtime("smollm2-135m", "vllm", progress=False)


def live_runtimes() -> int:
    """llama.cpp runtimes alive in this process (each holds a model and its context, about 1 GB)."""
    return sum(t.name == "nlqo-llama" and t.is_alive() for t in threading.enumerate())


def load_135m():
    from nlqo.runtime.models import load_local

    return load_or_skip(lambda: load_local("smollm2-135m", runtime="llama-cpp", threads=2, progress=False))


def test_the_last_closed_handle_frees_the_model_and_later_calls_say_it_was_closed():
    before = live_runtimes()
    model = load_135m()
    fork = model.fork()
    assert live_runtimes() == before + 1
    model.close()
    model.close()  # idempotent
    assert fork.complete("The capital of Spain is", max_tokens=3).usage.generated_tokens > 0  # the fork holds it
    fork.close()
    assert live_runtimes() == before
    with pytest.raises(LLMError, match="closed"):
        fork.complete("The capital of Spain is", max_tokens=3)


def test_a_handle_dropped_without_close_frees_its_model():
    import gc

    before = live_runtimes()
    model = load_135m()
    assert live_runtimes() == before + 1
    del model
    gc.collect()
    assert live_runtimes() == before


def test_commands_run_in_process_leave_no_model_loaded(tmp_path, capsys):
    """A caller of ``nlqo.cli.main`` (a test suite, a notebook) gets its memory back after each command."""
    import json

    from nlqo.cli import main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        json.dumps({"id": "h1", "title": "The Hobbit", "text": "The Hobbit is a novel by J. R. R. Tolkien."}) + "\n"
    )
    assert main(["index", str(corpus), "--out", str(tmp_path / "index"), "--quiet"]) == 0
    load_135m().close()  # skips (or fails in CI) when the model is not installed
    before = live_runtimes()
    common = ["--index", str(tmp_path / "index"), "--model", "smollm2-135m", "-k", "1", "--quiet"]
    assert main(["ask", "Who wrote The Hobbit?", *common, "--strategy", "retrieve"]) == 0
    assert live_runtimes() == before
    assert main(["explain", "Who wrote The Hobbit?", *common, "--format", "json"]) in (0, 2)
    assert live_runtimes() == before
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "q1", "question": "Who wrote The Hobbit?", "answer": "Tolkien"}) + "\n")
    bench = ["bench", "--questions", str(questions), "--index", str(tmp_path / "index"), "--model", "smollm2-135m"]
    assert main([*bench, "--strategies", "standard-rag", "--out", str(tmp_path / "run"), "-k", "1", "--quiet"]) == 0
    assert live_runtimes() == before
    capsys.readouterr()
