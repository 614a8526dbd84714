# Turns a text file into a C source defining `const char NAME[]` and `const size_t NAME_len`.
# Used to prepend src/numeric/builtins.h to generated C, so one file defines the semantics that
# both the library and generated code compile, and for the notation's prelude
# (src/notation/prelude.cnl). Usage: cmake -DIN=.. -DOUT=.. -DNAME=.. -P embed.cmake
file(READ "${IN}" content HEX)
string(LENGTH "${content}" hexlen)
math(EXPR len "${hexlen} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${content}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "/* Generated from ${IN} by cmake/embed.cmake. */\n#include <stddef.h>\nconst char ${NAME}[] = {\n${bytes}0x00};\nconst size_t ${NAME}_len = ${len};\n")
