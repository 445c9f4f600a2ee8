// caption.c: see caption.h.
#include "caption.h"
#include "../layers/dit.h"
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

// The shapes data's words (data/shapes.c) first, then a few more for image folders' captions
static const char *const WORDS[] = {
    "a", "small", "large", "red", "orange", "yellow", "green", "cyan", "blue", "purple", "pink",
    "circle", "square", "triangle", "cross", "ring", "diamond", "horizontal", "vertical", "bar",
    "x", "two", "dots", "at", "in", "the", "top", "bottom", "left", "right", "centre",
    "an", "one", "three", "big", "tiny", "black", "white", "grey", "brown", "dark", "light",
    "bright", "background", "on", "with", "of", "and", "shape", "middle", "upper", "lower",
};
enum { WORD_COUNT = sizeof WORDS / sizeof WORDS[0] };
_Static_assert(WORD_COUNT <= CAPTION_MAX_WORDS, "the vocabulary holds at most 64 words");
_Static_assert(WORD_COUNT + 1 == DIT_TEXT_VOCAB, "the model's word embedding has a row per word and padding");

int caption_vocab_size(void) { return WORD_COUNT; }

const char *caption_word(int id) { return id >= 1 && id <= WORD_COUNT ? WORDS[id - 1] : NULL; }

void caption_vocabulary(char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < WORD_COUNT && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? " " : "", WORDS[i]);
}

static bool separator(char c) { return isspace((unsigned char)c) || strchr(",.;:!?\"'()-", c); }

int caption_tokenize(const char *text, int64_t *ids, int L, const char *where, char *err, size_t len) {
    int n = 0;
    for (const char *at = text; *at;) {
        if (separator(*at)) {
            at++;
            continue;
        }
        size_t k = 0;
        while (at[k] && !separator(at[k])) k++;
        char word[32];
        int id = 0;
        if (k < sizeof word) {
            for (size_t j = 0; j < k; j++) word[j] = (char)tolower((unsigned char)at[j]);
            word[k] = 0;
            for (int w = 0; w < WORD_COUNT && !id; w++)
                if (!strcmp(word, WORDS[w])) id = w + 1;
        }
        if (!id)
            return snprintf(err, len, "%s: the word '%.*s' is not in the captions' vocabulary (docs/text.md "
                            "lists its %d words); reword the caption", where, (int)(k < 40 ? k : 40),
                            at, WORD_COUNT), -1;
        if (n < L) ids[n] = id;
        n++;
        at += k;
    }
    if (n > L)
        return snprintf(err, len, "%s: the caption has %d words, more than --text-len %d; shorten it "
                        "or raise --text-len", where, n, L), -1;
    for (int i = n; i < L; i++) ids[i] = 0;
    return 0;
}

void caption_text(const int64_t *ids, int L, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < L && n < len; i++)
        if (caption_word((int)ids[i]))
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? " " : "", caption_word((int)ids[i]));
}
