/* A Hugging Face tokenizer.json (with the tokenizer_config.json beside it)
 * turned into the GGUF tokenizer keys llama.cpp's convert_hf_to_gguf.py
 * writes for the same model: byte-level BPE vocabularies (Llama 3, Qwen2/3,
 * gpt-oss, GPT-2) as tokenizer.ggml.model "gpt2" with the pre-tokenizer
 * name the converter gives that regex, SentencePiece-style BPE vocabularies
 * (Gemma 3) as "llama" with scores in merge order. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "model/gguf_write.h"

/* True when path names a tokenizer.json rather than a vocabulary GGUF. */
bool vocab_json_is_json(const char *path);

/* Adds every tokenizer.* key to w and sets *n_vocab (the number of tokens:
 * the largest id + 1).  chat_template (NULL: tokenizer_config.json's, if
 * any) is written as tokenizer.chat_template instead of the config's
 * templates.  0 or negative with a message naming the file and what in it
 * is not supported. */
int vocab_json_write(struct gguf_writer *w, const char *path, const char *chat_template,
                     int *n_vocab, char *err, size_t err_len);
