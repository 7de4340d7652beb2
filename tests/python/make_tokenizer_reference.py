#!/usr/bin/env python3
"""Writes the reference ids that tests/test_text.cpp checks strata's BertTokenizer against,
from Hugging Face's `tokenizers` package (pip install tokenizers) reading the same files:

  tests/reference/polarity_token_ids.txt.gz  one line per sentence of the polarity data, in
      file order: the ids of its word pieces, without [CLS] and [SEP], untruncated
  tests/reference/tokenizer_cases.json  hard cases (accents, CJK, controls, whitespace
      kinds, symbols, long words, special tokens in the text) with their ids, and for each
      its [CLS] ... [SEP] encoding truncated and padded to 16

The tokenizer is built from vocab.txt with tokenizer_config.json's settings (as strata's
is) and checked to agree with the model's own tokenizer.json on every text first.
Usage: make_tokenizer_reference.py [MODEL_DIR] [POLARITY_CSV]
"""
import csv
import gzip
import json
import os
import sys

from tokenizers import BertWordPieceTokenizer, Tokenizer

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference")
model_dir = sys.argv[1] if len(sys.argv) > 1 else "/usr/local/share/strata/all-minilm-l6-v2"
polarity = sys.argv[2] if len(sys.argv) > 2 else "/usr/local/share/strata/sentence-polarity/polarity-en-pang&lee2.csv"

config = json.load(open(os.path.join(model_dir, "tokenizer_config.json")))
tok = BertWordPieceTokenizer(os.path.join(model_dir, "vocab.txt"), lowercase=config["do_lower_case"],
                             strip_accents=config["strip_accents"], clean_text=True,
                             handle_chinese_chars=config["tokenize_chinese_chars"])
own = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
own.no_truncation()
own.no_padding()


def ids(text):
    full = tok.encode(text).ids
    assert own.encode(text).ids == full, text
    assert full[0] == tok.token_to_id("[CLS]") and full[-1] == tok.token_to_id("[SEP]")
    return full[1:-1]


with open(polarity, encoding="utf-8-sig", newline="") as f:
    sentences = [row[1] for row in csv.reader(f)]
assert len(sentences) == 4000, len(sentences)
with gzip.GzipFile(os.path.join(root, "polarity_token_ids.txt.gz"), "wb", mtime=0) as out:
    for s in sentences:
        out.write((" ".join(map(str, ids(s))) + "\n").encode())

cases = [
    "Héllò hôw are ü?", "naïve café Ångström", "İstanbul ΣΊΣΥΦΟΣ straße", "e\u0301 combining and \u1e9b\u0323 dots",
    "日本語のテキスト 中文字符 한국어", "tab\there\nnewline\r\nreturn", "\u00a0no-break\u2003em\u3000ideographic",
    "zero\u200bwidth\u200dand\ufeffbom", "control\u0001\u0085\u000b\u000cchars\u007f", "nul\u0000and\ufffdreplacement",
    "$100 + <b>x</b> ^ ` | ~ = 5", "don't stop-believing... (really!) [sic]", "\u201csmart quotes\u201d \u2014 dashes \u2013 \u00bf\u00a1",
    "a" * 150 + " short", "supercalifragilisticexpialidocious antidisestablishmentarianism", "U.S.A. e.g. 3.14",
    "emoji \U0001F600 great \U0001F44D", "\ufb01 ligature \u2163 roman \u2082 subscript \u00bd half", "\u01c5 title \u01c4 upper",
    "private \ue000 use \U000E0080 unassigned",
    "a\u0378b \U0010FFFF soft\u00adhyphen \u0600x", "\u0645\u0631\u062d\u0628\u0627 arabic \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35 thai",
    "", "   ", "hello [MASK] world [SEP] and [CLS]", "[UNK][PAD]x", "the rock is destined to be the 21st century's new \" conan \"",
]
full_ids = [ids(text) for text in cases]
encoded = []
tok.enable_truncation(16)
tok.enable_padding(length=16, pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")
for text, text_ids in zip(cases, full_ids):
    e = tok.encode(text)
    encoded.append({"text": text, "ids": text_ids, "encoding": e.ids, "attention_mask": e.attention_mask})
with open(os.path.join(root, "tokenizer_cases.json"), "w", encoding="utf-8") as out:
    json.dump({"max_length": 16, "cases": encoded}, out, ensure_ascii=True, indent=1)
    out.write("\n")
print(f"wrote {len(sentences)} sentences and {len(cases)} cases to {os.path.normpath(root)}")
