# `hybrid-twin fuzz` end to end: an unknown property is one line on stderr and exit 2; --json
# prints rows with exactly the keys property, cases, seconds, result; a stored counterexample
# that still fails replays with exit 1, one that passes with exit 0.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

execute_process(COMMAND ${BIN} fuzz --property no.such.property --cases 1 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "unknown property: expected exit 2, got ${rc}")
endif()
if(NOT err MATCHES "^error: unknown property 'no.such.property'")
  message(FATAL_ERROR "unknown property: expected one error line, got: ${err}")
endif()

execute_process(COMMAND ${BIN} fuzz --property pattern.roundtrip --property pattern.rule.G2 --cases 50 --seed 3 --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fuzz --json: expected exit 0, got ${rc}: ${err}")
endif()
string(JSON n LENGTH "${out}")
if(NOT n EQUAL 2)
  message(FATAL_ERROR "fuzz --json: expected 2 rows, got ${n}: ${out}")
endif()
string(JSON row GET "${out}" 0)
string(JSON keys LENGTH "${row}")
string(JSON name GET "${row}" property)
string(JSON cases GET "${row}" cases)
string(JSON result GET "${row}" result)
string(JSON seconds GET "${row}" seconds)
if(NOT keys EQUAL 4 OR NOT name STREQUAL "pattern.roundtrip" OR NOT cases EQUAL 50 OR NOT result STREQUAL "pass")
  message(FATAL_ERROR "fuzz --json: unexpected row ${row}")
endif()

file(WRITE ${WORK}/fails.json [=[{"format": "hybrid-twin-counterexample/1", "property": "pattern.rule.G5", "seed": 1,
  "input": {"pattern": "[M*]", "code": "G5", "position": 2}, "message": ""}]=])
execute_process(COMMAND ${BIN} fuzz --replay ${WORK}/fails.json RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT out MATCHES "still fails")
  message(FATAL_ERROR "replay of a failing case: expected exit 1 and 'still fails', got ${rc}: ${out}")
endif()
file(WRITE ${WORK}/passes.json [=[{"format": "hybrid-twin-counterexample/1", "property": "pattern.rule.G5", "seed": 1,
  "input": {"pattern": "[MM]", "code": "G5", "position": 2}, "message": ""}]=])
execute_process(COMMAND ${BIN} fuzz --replay ${WORK}/passes.json RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "passes now")
  message(FATAL_ERROR "replay of a passing case: expected exit 0 and 'passes now', got ${rc}: ${out}")
endif()
