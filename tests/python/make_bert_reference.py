#!/usr/bin/env python3
"""Writes tests/reference/minilm_reference.safetensors, the oracle that tests/test_bert.cpp
checks strata's Bert against: Hugging Face's `transformers` BertModel (PyTorch, float32,
eval mode) running all-MiniLM-L6-v2 from the same files on a few sentences, each padded to
24 tokens by the same files' tokenizer.

  input_ids          F32 [4, 24]   (ids as floats: strata's model input)
  attention_mask     F32 [4, 24]
  last_hidden_state  F32 [4, 24, 384]
  pooler_output      F32 [4, 384]

Usage (in a Python with torch and transformers, e.g. the anchors' venv):
  make_bert_reference.py [MODEL_DIR]
"""
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import BertModel, BertTokenizerFast

model_dir = sys.argv[1] if len(sys.argv) > 1 else "/usr/local/share/strata/all-minilm-l6-v2"
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference", "minilm_reference.safetensors")
sentences = [
    "the rock is destined to be the 21st century's new \" conan \"",
    "a gorgeous , witty , seductive movie .",
    "bad .",
    "an utterly charming and hilarious film that reminded me of the best of the disney comedies from the 60s .",
]
tokenizer = BertTokenizerFast.from_pretrained(model_dir)
batch = tokenizer(sentences, padding="max_length", truncation=True, max_length=24, return_tensors="pt")
model = BertModel.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
with torch.no_grad():
    result = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                   token_type_ids=batch["token_type_ids"])
save_file({
    "input_ids": batch["input_ids"].float().contiguous(),
    "attention_mask": batch["attention_mask"].float().contiguous(),
    "last_hidden_state": result.last_hidden_state.float().contiguous(),
    "pooler_output": result.pooler_output.float().contiguous(),
}, out, metadata={"source": "transformers " + __import__("transformers").__version__ + ", torch " + torch.__version__})
print("wrote", os.path.normpath(out))
