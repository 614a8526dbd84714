/* A small strict JSON reader for file headers (safetensors): objects, arrays, strings and
 * integers; no fractions, exponents, true, false or null. The tree lives in the context's arena.
 *
 * Invariants: a text is accepted only when it is one value surrounded by JSON whitespace, at most
 * CN_JSON_MAX_DEPTH containers deep and at most CN_JSON_MAX_TEXT bytes long (so counts fit an
 * int); strings are valid UTF-8 without NUL (\u0000 is refused: they are C strings); integers fit
 * int64_t; an object has no two equal keys. Every refusal is CN_ERR_INVALID with the message
 * "FILE: at byte N: WHAT", N counted from the start of the file (the text's own offset plus the
 * `base` given), WHAT saying what was expected and what was found. */
#ifndef CN_DATA_JSON_H
#define CN_DATA_JSON_H

#include "core/core.h"

#define CN_JSON_MAX_DEPTH 64
#define CN_JSON_MAX_TEXT  ((size_t)1 << 30)

typedef enum { CN_JSON_OBJECT, CN_JSON_ARRAY, CN_JSON_STRING, CN_JSON_INT } cn_json_kind;

typedef struct cn_json cn_json;
/* An object's member (key set) or an array's element (key NULL). */
typedef struct {
  const char *key;
  size_t key_offset; /* of the key's opening quote, in the text */
  cn_json *value;
} cn_json_member;
struct cn_json {
  cn_json_kind kind;
  int count;     /* members of an object, elements of an array */
  size_t offset; /* of the value's first byte, in the text */
  union {        /* by kind: a header's tree stays small (24 bytes a value) */
    int64_t integer;
    const char *string;      /* decoded, NUL-terminated */
    cn_json_member *members; /* objects and arrays */
  };
};

/* Parses text[0 .. len) (NUL bytes inside are refused as any stray byte); NULL with the message
 * above, or CN_ERR_NOMEM when the arena is exhausted. */
cn_json *cn_json_parse(cn_ctx *ctx, const char *text, size_t len, const char *file, size_t base);
/* The value of key in an object; NULL when absent. */
const cn_json *cn_json_get(const cn_json *object, const char *key);
/* True when s[0 .. len) is valid UTF-8 (no overlong form, surrogate or code point past
 * U+10FFFF); else false with *bad the offset of the first invalid byte. */
bool cn_json_utf8_valid(const char *s, size_t len, size_t *bad);

#endif
