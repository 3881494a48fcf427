"""Reference for the C++ byte-level BPE tokenizer test (tests/stages/text/test_bpe_tokenizer.cpp):
trains the tiny Qwen tokenizer locally (vgen_export.tiny_hunyuan15, the `tokenizers` package),
saves its tokenizer.json and prints, as JSON, the ids HF gives a few hundred strings: ASCII,
accents (composed and decomposed), CJK, emoji, whitespace runs and kinds, contractions, numbers,
the added tokens inside text, and HunyuanVideo 1.5's chat template around prompts.

Usage: python -m vgen_reference.bpe_tokenizer_reference OUT_DIR"""
import json
import pathlib
import random
import sys

from vgen_export.tiny_hunyuan15 import CORPUS, train_tiny_qwen_tokenizer

PIECES = ["a", "dog", "barks", " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n ", "\u00a0", "\u3000", "\u2028",
          "\u0085", "\u000b", "\u000c", "café", "cafe\u0301", "naïve", "Zürich", "Ærø", "señor", "ñ", "n\u0303",
          "東京", "の夜景", "一只小狗", "서울", "🐶", "🚗💨", "👩‍👩‍👧", "🇫🇷", "123", "3.14159", "1,000,000", "it's",
          "We'RE", "they'll", "I'd", "don't", "''", "!!!", "...", "—", "«»", "\"", "“quoted”", "<|im_start|>",
          "<|im_end|>", "<|endoftext|>", "<|im_start", "x<|im_end|>y", "Ä", "ß", "İ", "ﬁ", "Ⅻ", "½", "x²", "\u200b",
          "\ufeff", "Ω", "Ω", "A\u030a", "Å", "🙂🙂🙂", "مرحبا", "שלום", "Привет", "γειά", "ก", "\u0301", "tab\tend"]


def strings():
    yield from CORPUS
    yield from PIECES
    rng = random.Random(0)
    for _ in range(250):
        yield "".join(rng.choice(PIECES) + rng.choice(["", " ", ""]) for _ in range(rng.randint(1, 8)))
    system = "You are a helpful assistant. Describe the video."
    for prompt in ["a dog barks at a passing car", " ", "Une fête à Paris", "東京の夜景 🐶", 'a sign "OPEN"', "a\n\nb  c"]:
        yield f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tiny_qwen_tokenizer()
    tokenizer.save_pretrained(out)
    backend = tokenizer.backend_tokenizer
    cases = []
    for text in strings():
        ids = backend.encode(text, add_special_tokens=False).ids
        assert ids == tokenizer(text, add_special_tokens=False)["input_ids"]  # transformers' Qwen2Tokenizer agrees
        cases.append({"text": text, "ids": ids})
    print(json.dumps({"tokenizer": str(out / "tokenizer.json"), "vocab": len(tokenizer), "pad_id": tokenizer.pad_token_id,
                      "cases": cases}))


if __name__ == "__main__":
    main()
