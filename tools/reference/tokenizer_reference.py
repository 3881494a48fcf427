"""Reference for the C++ tokenizer test: trains a small SentencePiece unigram model locally
(no downloads) and prints, as JSON, the model path and the ids Python's sentencepiece gives
for a set of texts.

Usage: python -m vgen_reference.tokenizer_reference OUT_DIR"""
import json
import pathlib
import sys

import sentencepiece as spm

COLORS = ["red", "green", "blue", "yellow", "cyan", "magenta", "white", "orange"]
SHAPES = ["circle", "square", "triangle"]
DIRS = ["left", "right", "up", "down"]


def corpus():
    for c in COLORS:
        for s in SHAPES:
            for d in DIRS:
                yield f"a {c} {s} moving {d}"
                yield f"a {c} {s} moving {d} on a gray background"
    yield "The quick brown fox jumps over the lazy dog, 123 times!"
    yield "Ünïcödé text: café, naïve, 日本語"


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    text_file = out / "corpus.txt"
    text_file.write_text("\n".join(corpus()) + "\n", encoding="utf-8")
    prefix = out / "tok"
    spm.SentencePieceTrainer.train(
        input=str(text_file), model_prefix=str(prefix), vocab_size=60, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=1.0, seed_sentencepiece_size=10000,
        num_threads=1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(prefix) + ".model")
    texts = ["a red circle moving left", "a cyan triangle moving up on a white background",
             "  leading and trailing spaces  ", "café 日本語 ünknown wörds", "", "x" * 300]
    print(json.dumps({"model": str(prefix) + ".model", "vocab": sp.get_piece_size(),
                      "cases": [{"text": t, "ids": sp.encode(t)} for t in texts]}))


if __name__ == "__main__":
    main()
