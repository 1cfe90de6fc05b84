#!/usr/bin/env python3
"""Checks the worker's encoding against Hugging Face `tokenizers` (the Rust library behind
BertTokenizerFast) on the same vocab: single texts and text pairs, BERT's [CLS] a [SEP] b [SEP],
truncation "longest_first", with and without the special tokens.

Usage: hf_tokenizer_check.py ENCODE_TOOL [--cases N] [--seed S]
ENCODE_TOOL is build/worker/encode_tool. Random texts mix words of the vocab, words WordPiece
splits into pieces, unknown words, capitals, accents and punctuation; the lengths straddle the
truncation's cases (the shorter text within half the room or not, ties). Exit 0 when every case
agrees, 1 with the first differences printed."""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "a", "run", "play", "want", "un", "cafe", "hello", "world", "model", "train",
         "spam", "mail", "free", "click", "now", "good", "bad", "same", "other", "is", "not"]
SUFFIXES = ["##ing", "##ed", "##s", "##er", "##able", "##aff", "##ly", "##x"]
PUNCT = [",", ".", "!", "?", "'", "$", "(", ")", "-"]


def vocab():
    return SPECIALS + WORDS + SUFFIXES + PUNCT


def word(rng):
    r = rng.random()
    if r < 0.45:
        w = rng.choice(WORDS)
    elif r < 0.75:  # pieces: run##ning is not, run##ing is
        w = rng.choice(WORDS) + "".join(rng.choice(SUFFIXES)[2:] for _ in range(rng.randint(1, 2)))
    elif r < 0.85:
        w = "".join(rng.choice("qzjkvw") for _ in range(rng.randint(2, 6)))  # [UNK]
    else:
        w = rng.choice(PUNCT)
    if rng.random() < 0.15:
        w = w.capitalize()
    if w == "cafe" and rng.random() < 0.5:
        w = "caf\u00e9"  # accents are stripped on both sides
    return w


def text(rng, words):
    out = ""
    for _ in range(words):
        w = word(rng)
        out += w if (not out or (w in PUNCT and rng.random() < 0.5)) else " " + w
    return out


def hf_tokenizer(ids, specials):
    tok = Tokenizer(WordPiece(vocab=ids, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=True, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    if specials:
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tool")
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    ids = {t: i for i, t in enumerate(vocab())}
    bad = checked = pairs_cut = 0
    with tempfile.TemporaryDirectory() as tmp:
        vpath = os.path.join(tmp, "vocab.txt")
        with open(vpath, "w") as f:
            f.write("\n".join(vocab()) + "\n")
        for specials in (True, False):
            tok = hf_tokenizer(ids, specials)
            by_len = {}
            for _ in range(a.cases):
                max_len = rng.randint(3, 40)
                pair = rng.random() < 0.75
                la = rng.randint(0 if specials else 1, 30)
                case = {"text": text(rng, la)}
                if pair:
                    lb = la if rng.random() < 0.2 else rng.randint(0 if specials else 1, 30)
                    case["text_pair"] = text(rng, lb)
                by_len.setdefault(max_len, []).append(case)
            for max_len, cases in sorted(by_len.items()):
                inp = "".join(json.dumps(c) + "\n" for c in cases)
                argv = [a.tool, vpath, str(max_len)] + ([] if specials else ["nospecials"])
                out = subprocess.run(argv, input=inp, capture_output=True, text=True, check=True)
                ours = out.stdout.splitlines()
                if len(ours) != len(cases):
                    sys.exit(f"encode_tool gave {len(ours)} lines for {len(cases)} cases")
                for c, line in zip(cases, ours):
                    got_ids, got_cut = line.split("\t")
                    got = [int(x) for x in got_ids.split()]
                    tok.no_truncation()
                    full = tok.encode(c["text"], c.get("text_pair"), add_special_tokens=specials)
                    tok.enable_truncation(max_length=max_len, strategy="longest_first")
                    want = tok.encode(c["text"], c.get("text_pair"),
                                      add_special_tokens=specials).ids
                    cut = len(full.ids) > max_len
                    if not specials and not want:
                        want = [ids["[UNK]"]]  # the worker never gives an empty row
                    checked += 1
                    pairs_cut += cut and "text_pair" in c
                    if got != want or int(got_cut) != cut:
                        bad += 1
                        if bad <= 5:
                            print(f"DIFFER (max_len {max_len}, specials {specials}): {c}\n"
                                  f"  gantry {got} cut {got_cut}\n  hf     {want} cut {int(cut)}")
    print(f"hf_tokenizer_check: {checked - bad} of {checked} encodings equal to Hugging Face "
          f"tokenizers' ({pairs_cut} of them pairs cut by longest_first)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
