#!/bin/bash
# Regenerates the seed corpora of the libFuzzer targets (fuzz/corpus/<name>/) from the docs, the
# examples and the tests; the files are committed, so a fresh clone fuzzes without running this.
# Run from anywhere: ./fuzz/make_corpus.sh. Each seed is a file named by the first 16 hex digits
# of its SHA-1, so equal seeds from different sources are one file and reruns are stable.
#   script  every ```cnl block of docs/notation.md, every examples/*.cnl
#   tile    every let%tile body of those (the text after its '=' and the indented lines after
#           it), and the Tile statements and bodies the Tile tests write in one C string (each
#           statement also as a body returning its output)
#   einsum  every C string of the einsum tests that holds '=>', with its escapes decoded
# The binary corpora data_files (IDX and .npy files) and safetensors were written once by the
# tests' Python oracles, and export's seeds (NUL-separated hostile labels: the injection payload,
# splices, line breaks, trigraphs, nested comments, non-ASCII bytes) by hand; all are kept as
# they are: this script replaces only the three above.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/fuzz/corpus

put() { # put NAME: stdin becomes a seed of corpus NAME
  local tmp
  tmp=$(mktemp)
  cat >"$tmp"
  if [ -s "$tmp" ]; then
    mv "$tmp" "$out/$1/$(sha1sum <"$tmp" | cut -c1-16)"
  else
    rm -f "$tmp"
  fi
}

rm -rf "$out/script" "$out/tile" "$out/einsum"
mkdir -p "$out/script" "$out/tile" "$out/einsum"

# Scripts: docs blocks (one file per block, numbered in a temporary directory) and examples.
blocks=$(mktemp -d)
awk -v dir="$blocks" '/^```cnl$/ { n++; on = 1; next } /^```$/ { on = 0 } on { print > (dir "/" n) }' \
  "$root/docs/notation.md"
for f in "$blocks"/* "$root"/examples/*.cnl; do put script <"$f"; done

# Tile bodies of the scripts: after "let%tile NAME PARAMS =", the rest of that line and every
# following line that is blank or indented.
bodies=$(mktemp -d)
i=0
for f in "$blocks"/* "$root"/examples/*.cnl; do
  i=$((i + 1))
  awk -v prefix="$bodies/$i-" '
    function flush() {
      if (body != "") { n++; printf "%s", body > (prefix n); close(prefix n) }
      body = ""; on = 0
    }
    on && ($0 ~ /^[ \t]/ || $0 == "") { body = body $0 "\n"; next }
    on { flush() }
    /^let%tile / { on = 1; sub(/^[^=]*=[ \t]*/, ""); body = ($0 == "" ? "" : $0 "\n") }
    END { flush() }' "$f"
done
for f in "$bodies"/*; do put tile <"$f"; done

# Tile statements and one-line bodies written in the Tile tests as a single C string.
grep -ohE -e '"[A-Z][A-Za-z0-9]*\[[^"]*\] *(\+=|\*=|>=|<=|=) [^"]*"' \
  -e '"[^"]*(bind_dims|return )[^"]*"' "$root"/tests/test_tile*.c |
  sort -u | while IFS= read -r s; do
  s=${s#\"}
  s=${s%\"}
  printf '%b' "$s" | put tile
  # a statement is also a function body once it returns its output
  case $s in [A-Z]*\[* | [A-Z]*\(*) printf '%b\nreturn %s\n' "$s" "${s%%[[(]*}" | put tile ;; esac
done

# Einsum specs: C strings of the einsum tests holding '=>'.
grep -ohE '"[^"]*=>[^"]*"' "$root"/tests/test_einsum.c "$root"/tests/test_shape_einsum.c |
  sort -u | while IFS= read -r s; do
  s=${s#\"}
  printf '%b' "${s%\"}" | put einsum
done

rm -rf "$blocks" "$bodies"
for c in script tile einsum; do echo "$c: $(ls "$out/$c" | wc -l) seeds"; done
