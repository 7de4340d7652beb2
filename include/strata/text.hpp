#pragma once
// Text for language models: Unicode through utf8proc and BERT's WordPiece tokenizer. Link
// the strata::text CMake target (Debian's libutf8proc-dev). Labelled text files and the
// sentence polarity data need no extra library and come with <strata/data.hpp>. See
// docs/bert.md.

#include "strata/data/bert_tokenizer.hpp"
#include "strata/data/unicode.hpp"
