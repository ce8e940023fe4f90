# Writes OUT: a C++ source defining `const char* const SYMBOL` (in namespace NS) that holds the text
# of the file IN, so a data file the binary needs works wherever the binary runs. Build-time helper.
file(READ "${IN}" text)
set(body "// Generated from ${NAME} by cmake/EmbedText.cmake; do not edit.\n")
string(APPEND body "namespace ${NS} {\nextern const char* const ${SYMBOL};\n")
string(APPEND body "const char* const ${SYMBOL} = R\"hybridtwintext(${text})hybridtwintext\";\n}  // namespace ${NS}\n")
file(WRITE "${OUT}.tmp" "${body}")
file(RENAME "${OUT}.tmp" "${OUT}")
