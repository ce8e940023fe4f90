# Runs scripts/check-doc-commands on FILES against BIN and requires exit code EXPECT_RC and
# output matching EXPECT (a regular expression): the fixture with a bogus flag must fail naming
# its file and line, the fixture of every documented form and the real docs must pass.
separate_arguments(files UNIX_COMMAND "${FILES}")
execute_process(COMMAND ${CHECKER} --bin ${BIN} ${files}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL EXPECT_RC)
  message(FATAL_ERROR "expected exit code ${EXPECT_RC}, got ${rc}:\n${out}${err}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "expected output matching '${EXPECT}', got:\n${out}${err}")
endif()
message(STATUS "${out}")
