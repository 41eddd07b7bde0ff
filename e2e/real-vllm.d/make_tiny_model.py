"""Builds the tiny random-weight Llama the real-vLLM tests serve (e2e/real-vllm install).

usage: make_tiny_model.py OUT_DIR

Deterministic: the byte-level BPE tokenizer (vocabulary 4,096) is trained on a corpus generated
here from a seeded generator (no file of the machine is read, so every machine builds the same
tokenizer), and the weights come from torch.manual_seed(0). 2 layers, hidden 128, 4 heads,
context 2,048 tokens: about 1.6 M parameters, 6 MB. Its output is random text; the load
generator sends token-id prompts with "ignore_eos": true so every request generates exactly
max_tokens.
"""
import os
import random
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


def corpus(seed: int = 0, lines: int = 20000):
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "qu", "ze", "pa", "do", "fi", "gu"]
    for _ in range(lines):
        words = ("".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(12))
        yield " ".join(words) + f" {rng.randint(0, 99999)}.\n"


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4096,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    hf_tok.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    )
    hf_tok.save_pretrained(out)
    cfg = LlamaConfig(
        vocab_size=len(hf_tok),
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        bos_token_id=hf_tok.bos_token_id,
        eos_token_id=hf_tok.eos_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(out)
    print("saved", out, "vocab", len(hf_tok), "params", sum(p.numel() for p in model.parameters()))


if __name__ == "__main__":
    main()
