"""A GGUF model run in process by llama.cpp (llama-cpp-python's low-level API), greedy.

The same capabilities as :class:`~nlqo.runtime.llm.local.TransformersLLM`, so every strategy runs on it
unchanged: usage accounting on every call, stop strings and the vocabulary's end-of-generation
tokens, prefix reuse, sessions (append without sampling, generate, fork, truncate). It runs the
GGUF weights as they are (no de-quantized copy), which on a 2-core CPU answers like float32
transformers at a fraction of the time (docs/models.md).

How the model's work is organised:

* one llama.cpp context with ``n_seq`` **slots** (KV sequences, ``n_ctx_seq`` tokens each). A slot
  keeps the tokens of its last request resident, so a later request that shares a prefix with them
  (the next step of a session, another question on the same scaffold) computes only the rest;
* **saved prefixes**: with ``prefix_cache`` (and at a session's first generation) the KV state of the
  prompt (a chat prompt's scaffold, a session's fixed prefix) is copied to host memory, and restored
  into a slot for any later request that starts with it. Each :meth:`LlamaCppLLM.fork` has its own
  saved prefixes and slot affinity, so strategies measured side by side keep their own warm prefixes;
* one **scheduler thread** runs every llama_decode. Requests from several threads (the nodes of
  one tree wave) each take a slot; prompts are prefilled one chunk at a time, and all requests that
  are generating are decoded together, one token each, in one batch. On a CPU decoding is bound by
  memory bandwidth, so a batch of sequences costs less than as many separate steps.

Decoding is greedy (the lowest token id wins a tie, as ``argmax`` does), so a request's output does
not depend on what else was in its batch: ``tests/test_llamacpp.py`` checks batched against
sequential and restored prefixes against plain runs, token for token.

A request may carry a grammar (``constraint=``, :mod:`nlqo.runtime.llm.constrain`): its logits are masked
with numpy before the argmax, and the tokens the grammar forces are appended to the request without
sampling and computed in the next batch together with the token before them (counted as forced).

The package, one concern a module: :mod:`~nlqo.runtime.llm.llamacpp.loading` (the library, the file check,
the backend and its log lines), :mod:`~nlqo.runtime.llm.llamacpp.variants` (which CPU backend variant runs:
the best one a child-process probe shows to run here, or the one forced),
:mod:`~nlqo.runtime.llm.llamacpp.runtime` (the context and the scheduler thread's batched decode), :mod:`~nlqo.runtime.llm.llamacpp.kv` (slots and saved prefix states),
:mod:`~nlqo.runtime.llm.llamacpp.request` (choosing and taking tokens, under a grammar), and
:mod:`~nlqo.runtime.llm.llamacpp.handle` (:class:`LlamaCppLLM` and its sessions).
"""

from nlqo.runtime.llm.llamacpp.handle import LlamaCppLLM, LlamaSession
from nlqo.runtime.llm.llamacpp.loading import (
    DEFAULT_N_CTX_SEQ,
    DEFAULT_N_SEQ,
    GGUF_MAGIC,
    LOG,
    PREFILL_CHUNK,
    _init_backend,
    _LogLines,
    check_gguf,
    cpu_variant,
    default_threads,
)

__all__ = [
    "DEFAULT_N_CTX_SEQ",
    "DEFAULT_N_SEQ",
    "GGUF_MAGIC",
    "LOG",
    "PREFILL_CHUNK",
    "LlamaCppLLM",
    "LlamaSession",
    "_LogLines",
    "_init_backend",
    "check_gguf",
    "cpu_variant",
    "default_threads",
]
