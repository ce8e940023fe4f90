# run_json(OUT cmd args...): runs a hybrid-twin command, fails the test with its stderr on a
# non-zero exit, and leaves its stdout (JSON) in OUT. Included by the CLI test scripts.
function(run_json out)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "exit ${rc}: ${ARGN}\n${e}")
  endif()
  set(${out} "${o}" PARENT_SCOPE)
endfunction()
