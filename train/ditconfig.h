// ditconfig.h: the DiT config as text, from one table of (key, how to format, how to parse):
// checkpoint metadata (written and read), config.json, the rank check of the flags and
// --resume's comparison with the flags all go through it. Keys are the reference's argument
// names; a double is the shortest text that reads back exactly ("0.1", not "0.10000000000000001").
#pragma once
#include "../layers/dit.h"
#include <stddef.h>

#define DIT_CONFIG_FIELDS 10 // the table's rows, in DiTConfig's order
const char *dit_config_key(int i);
void dit_config_value(const DiTConfig *c, int i, char *buf, size_t len);
int dit_config_set(DiTConfig *c, int i, const char *text); // -1 if text is not a valid value
// The shortest text that reads back as exactly v.
void double_text(char *buf, size_t len, double v);
