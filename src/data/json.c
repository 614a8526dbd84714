/* The strict JSON reader of json.h: a recursive descent over the text, one value at a time.
 *
 * Invariants: p->pos never passes p->len and every byte is read only after a bounds check (the
 * text need not be NUL-terminated); the recursion is at most CN_JSON_MAX_DEPTH deep, so a hostile
 * header cannot exhaust the stack; every value costs at least one byte of text, so the arena
 * holds at most a small multiple of the text's size; a failure sets the context's message
 * exactly once, at the innermost point that detects it, and every caller returns NULL from
 * there. */
#include "data/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  cn_ctx *ctx;
  const unsigned char *text;
  size_t len, pos;
  const char *file;
  size_t base;
} parser;

/* What lies at `at`, for messages: a printable character quoted, another byte in hex, or the
 * end. */
static const char *found(const parser *p, size_t at, char buf[32]) {
  if (at >= p->len) return "the end of the text";
  unsigned char c = p->text[at];
  if (c >= 0x20 && c < 0x7f)
    snprintf(buf, 32, "'%c'", c);
  else
    snprintf(buf, 32, "byte 0x%02x", c);
  return buf;
}

static cn_json *fail(parser *p, size_t at, const char *fmt, ...) CN_PRINTF(3, 4);
static cn_json *fail(parser *p, size_t at, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  cn_fail(p->ctx, CN_ERR_INVALID, "%s: at byte %zu: %s", p->file, p->base + at, what);
  return NULL;
}

/* The failure "expected WHAT, found ..." at p->pos. */
static cn_json *expected(parser *p, const char *what) {
  char buf[32];
  return fail(p, p->pos, "expected %s, found %s", what, found(p, p->pos, buf));
}

static void skip_ws(parser *p) {
  while (p->pos < p->len) {
    unsigned char c = p->text[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
    p->pos++;
  }
}

/* The length of the valid UTF-8 sequence at s[0 .. n), 0 if there is none. */
static size_t utf8_sequence(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xbf; /* the range of the second byte */
  if (c >= 0xc2 && c <= 0xdf)
    len = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0; /* overlong */
    if (c == 0xed) hi = 0x9f; /* surrogates */
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90; /* overlong */
    if (c == 0xf4) hi = 0x8f; /* past U+10FFFF */
  } else
    return 0;
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0;
  return len;
}

bool cn_json_utf8_valid(const char *s, size_t len, size_t *bad) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < len;) {
    size_t n = utf8_sequence(u + i, len - i);
    if (n == 0) {
      *bad = i;
      return false;
    }
    i += n;
  }
  return true;
}

static size_t put_utf8(unsigned char *out, uint32_t cp) {
  if (cp < 0x80) {
    out[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (unsigned char)(0xc0 | cp >> 6);
    out[1] = (unsigned char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (unsigned char)(0xe0 | cp >> 12);
    out[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
    out[2] = (unsigned char)(0x80 | (cp & 0x3f));
    return 3;
  }
  out[0] = (unsigned char)(0xf0 | cp >> 18);
  out[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
  out[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
  out[3] = (unsigned char)(0x80 | (cp & 0x3f));
  return 4;
}

/* The four hex digits of a \u escape at p->pos (just after the 'u'); -1 after a failure. */
static long hex4(parser *p) {
  long v = 0;
  for (int i = 0; i < 4; i++, p->pos++) {
    int c = p->pos < p->len ? p->text[p->pos] : -1, d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else {
      expected(p, "a hex digit of a \\u escape");
      return -1;
    }
    v = v * 16 + d;
  }
  return v;
}

/* The code point of a \u escape (p->pos just after the 'u'), combining a surrogate pair; -1
 * after a failure. */
static long unicode_escape(parser *p) {
  size_t at = p->pos - 2;
  long cp = hex4(p);
  if (cp < 0) return -1;
  if (cp >= 0xdc00 && cp <= 0xdfff) {
    fail(p, at, "a low surrogate \\u%04lx without a high surrogate before it", cp);
    return -1;
  }
  if (cp >= 0xd800 && cp <= 0xdbff) {
    if (p->len - p->pos < 2 || p->text[p->pos] != '\\' || p->text[p->pos + 1] != 'u') {
      expected(p, "a \\u escape of a low surrogate after a high surrogate");
      return -1;
    }
    p->pos += 2;
    long lo = hex4(p);
    if (lo < 0) return -1;
    if (lo < 0xdc00 || lo > 0xdfff) {
      fail(p, p->pos - 6, "expected a low surrogate (\\udc00 to \\udfff), found \\u%04lx", lo);
      return -1;
    }
    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
  }
  if (cp == 0) {
    fail(p, at, "\\u0000 in a string: strings may not hold NUL here");
    return -1;
  }
  return cp;
}

/* A string at p->pos (its opening quote), decoded into the arena; NULL after a failure. */
static char *parse_string(parser *p) {
  size_t start = p->pos++;
  /* the decoded text is never longer than the raw one: find the closing quote to size it */
  size_t end = p->pos;
  while (end < p->len && p->text[end] != '"') end += p->text[end] == '\\' ? 2 : 1;
  if (end >= p->len) {
    fail(p, start, "unterminated string: expected a closing '\"' before the end of the text");
    return NULL;
  }
  unsigned char *out = cn_alloc(p->ctx, end - p->pos + 1);
  if (!out) return NULL;
  size_t n = 0;
  while (p->pos < end) {
    unsigned char c = p->text[p->pos];
    if (c < 0x20) {
      fail(p, p->pos, "control character 0x%02x in a string (write it as an escape)", c);
      return NULL;
    }
    if (c >= 0x80) {
      size_t len = utf8_sequence(p->text + p->pos, end - p->pos);
      if (len == 0) {
        fail(p, p->pos, "invalid UTF-8 byte 0x%02x in a string", c);
        return NULL;
      }
      memcpy(out + n, p->text + p->pos, len);
      n += len;
      p->pos += len;
      continue;
    }
    p->pos++;
    if (c != '\\') {
      out[n++] = c;
      continue;
    }
    unsigned char e = p->text[p->pos++];
    static const char escapes[] = "\"\"\\\\//b\bf\fn\nr\rt\t";
    const char *hit = NULL;
    for (const char *s = escapes; *s && !hit; s += 2)
      if ((unsigned char)*s == e) hit = s;
    if (hit) {
      out[n++] = (unsigned char)hit[1];
    } else if (e == 'u') {
      long cp = unicode_escape(p);
      if (cp < 0) return NULL;
      n += put_utf8(out + n, (uint32_t)cp);
    } else {
      char buf[32];
      fail(p, p->pos - 2, "unknown escape '\\' followed by %s", found(p, p->pos - 1, buf));
      return NULL;
    }
  }
  out[n] = '\0';
  p->pos = end + 1;
  return (char *)out;
}

/* An integer at p->pos: -?(0|[1-9][0-9]*) within int64_t, and no fraction or exponent. */
static cn_json *parse_integer(parser *p, cn_json *v) {
  bool negative = p->text[p->pos] == '-';
  if (negative) p->pos++;
  if (p->pos >= p->len || p->text[p->pos] < '0' || p->text[p->pos] > '9')
    return expected(p, "a digit");
  uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, m = 0;
  size_t first = p->pos;
  while (p->pos < p->len && p->text[p->pos] >= '0' && p->text[p->pos] <= '9') {
    unsigned d = p->text[p->pos] - '0';
    if (p->pos > first && p->text[first] == '0')
      return fail(p, first, "an integer with a leading zero");
    if (m > (limit - d) / 10) return fail(p, v->offset, "integer out of the range of int64");
    m = m * 10 + d;
    p->pos++;
  }
  if (p->pos < p->len &&
      (p->text[p->pos] == '.' || p->text[p->pos] == 'e' || p->text[p->pos] == 'E'))
    return fail(p, p->pos, "expected an integer, found a fraction or an exponent");
  v->integer = negative ? (int64_t)(0 - m) : (int64_t)m;
  return v;
}

static cn_json *parse_value(parser *p, int depth);

/* An object or array at p->pos (its opening bracket). */
static cn_json *parse_container(parser *p, cn_json *v, int depth) {
  bool object = v->kind == CN_JSON_OBJECT;
  char close = object ? '}' : ']';
  if (depth >= CN_JSON_MAX_DEPTH)
    return fail(p, p->pos, "nesting deeper than %d objects and arrays", CN_JSON_MAX_DEPTH);
  p->pos++;
  int cap = 0;
  cn_map keys = {.strings = true};
  skip_ws(p);
  if (p->pos < p->len && p->text[p->pos] == close) {
    p->pos++;
    return v;
  }
  for (;;) {
    cn_json_member m = {0};
    skip_ws(p);
    if (object) {
      if (p->pos >= p->len || p->text[p->pos] != '"') return expected(p, "a string key");
      m.key_offset = p->pos;
      if (!(m.key = parse_string(p))) return NULL;
      if (cn_map_get(&keys, m.key))
        return fail(p, m.key_offset, "duplicate key \"%s\" in an object", m.key);
      if (!cn_map_put(p->ctx, &keys, m.key, v)) return NULL;
      skip_ws(p);
      if (p->pos >= p->len || p->text[p->pos] != ':') return expected(p, "':' after a key");
      p->pos++;
    }
    if (!(m.value = parse_value(p, depth + 1))) return NULL;
    if (!cn_arena_grow(p->ctx, (void **)&v->members, &cap, v->count + 1, sizeof m)) return NULL;
    v->members[v->count++] = m;
    skip_ws(p);
    if (p->pos < p->len && p->text[p->pos] == ',') {
      p->pos++;
      continue;
    }
    if (p->pos < p->len && p->text[p->pos] == close) {
      p->pos++;
      return v;
    }
    return expected(p, object ? "',' or '}' after an object member"
                              : "',' or ']' after an array element");
  }
}

static cn_json *parse_value(parser *p, int depth) {
  skip_ws(p);
  if (p->pos >= p->len) return expected(p, "a value");
  cn_json *v = cn_alloc(p->ctx, sizeof *v);
  if (!v) return NULL;
  v->offset = p->pos;
  unsigned char c = p->text[p->pos];
  if (c == '{' || c == '[') {
    v->kind = c == '{' ? CN_JSON_OBJECT : CN_JSON_ARRAY;
    return parse_container(p, v, depth);
  }
  if (c == '"') {
    v->kind = CN_JSON_STRING;
    return (v->string = parse_string(p)) ? v : NULL;
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    v->kind = CN_JSON_INT;
    return parse_integer(p, v);
  }
  return expected(p, "a value (an object, an array, a string or an integer)");
}

cn_json *cn_json_parse(cn_ctx *ctx, const char *text, size_t len, const char *file, size_t base) {
  parser p = {ctx, (const unsigned char *)text, len, 0, file, base};
  if (len > CN_JSON_MAX_TEXT)
    return fail(&p, 0, "a JSON text of %zu bytes, more than the limit of %zu", len,
                CN_JSON_MAX_TEXT);
  cn_json *v = parse_value(&p, 0);
  if (!v) return NULL;
  skip_ws(&p);
  if (p.pos < len) return expected(&p, "the end of the JSON text after its value");
  return v;
}

const cn_json *cn_json_get(const cn_json *object, const char *key) {
  for (int i = 0; i < object->count; i++)
    if (strcmp(object->members[i].key, key) == 0) return object->members[i].value;
  return NULL;
}
