"""A tiny random Llama on the transformers runtime (64 words, 2 layers): fast tests of decode loops,
sessions and cancellation that need a real model's code path but not its answers."""

from __future__ import annotations

WORDS = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(61)]
"""Its vocabulary: the special tokens, then w0 ... w60."""


def tiny_transformers_llm():
    """The model, seeded (the same weights on every call), as a ``TransformersLLM`` named ``tiny``."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from nlqo.runtime.llm.local import TransformersLLM

    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(WORDS),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
    )
    return TransformersLLM(LlamaForCausalLM(config).eval(), tokenizer, name="tiny")
