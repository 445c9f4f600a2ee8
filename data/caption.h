// caption.h: captions and their tokenizer. A caption is words of one fixed vocabulary (at most
// CAPTION_MAX_WORDS words, listed by caption_vocabulary and in docs/text.md), lower case, separated
// by spaces or punctuation; the tokenizer maps word w to its id (1 + its place in the vocabulary)
// and pads to L tokens with id 0, the padding that attention masks. The empty caption (every id
// 0) is the null caption of classifier-free guidance.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define CAPTION_MAX_WORDS 64 // the vocabulary's size bound
#define CAPTION_MAX_LEN 256  // --text-len's bound

// Words in the vocabulary, and the ids they take: 1 .. caption_vocab_size(); id 0 is padding
int caption_vocab_size(void);
const char *caption_word(int id); // NULL for 0 and ids past the vocabulary
// The vocabulary, the words separated by spaces, into buf
void caption_vocabulary(char *buf, size_t len);

// text -> ids (L), padded with 0. Returns 0, or -1 with a sentence into err naming `where` (a file,
// a flag) and the word outside the vocabulary, or the count of words beyond L.
int caption_tokenize(const char *text, int64_t *ids, int L, const char *where, char *err, size_t len);
// ids (L) -> the words, separated by spaces ("" for the empty caption), into buf
void caption_text(const int64_t *ids, int L, char *buf, size_t len);
