# Commands load only what they use (docs/build.md "What a command loads"):
# - the executable does not link CUDA, NCCL, MPI, SimGrid or ns-3 (ldd lists none);
# - `pattern` runs without opening a plugin: under LD_DEBUG=files the loader opens no libht_cli_*
#   plugin, no SimGrid and no cuBLAS;
# - `simulate` opens the twin's plugin and SimGrid, but not cuBLAS or MPI;
# - `fuzz` (an executable of its own when FUZZ_HELPER is set) is reached through hybrid-twin, and
#   --check-args / --check-args-from answer for it: a bad flag is refused with the helper's reason.
find_program(LDD ldd)
if(LDD)
  execute_process(COMMAND ${LDD} ${BIN} OUTPUT_VARIABLE libs RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ldd ${BIN} failed (${rc})")
  endif()
  if(libs MATCHES "(libcuda|libcublas|libnccl|libmpi|libsimgrid|libns3)[^\n]*")
    message(FATAL_ERROR "hybrid-twin links ${CMAKE_MATCH_0} at load time:\n${libs}")
  endif()
endif()

function(opened_by out_var)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env LD_DEBUG=files ${BIN} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${ARGN} failed (${rc}): ${err}")
  endif()
  set(${out_var} "${err}" PARENT_SCOPE)
endfunction()

opened_by(loaded pattern "M*")
if(loaded MATCHES "file=[^ ]*(libht_cli_twin|libht_cli_engine|libsimgrid|libcublas|libmpi|libht_engine)[^ ]*")
  message(FATAL_ERROR "pattern opened ${CMAKE_MATCH_0}")
endif()
if(SIM)
  opened_by(loaded simulate --pattern "M*-" --dp 2)
  if(NOT loaded MATCHES "file=[^ ]*libht_cli_twin" OR NOT loaded MATCHES "file=[^ ]*libsimgrid")
    message(FATAL_ERROR "simulate did not open the twin's plugin and SimGrid")
  endif()
  if(loaded MATCHES "file=[^ ]*(libcublas|libnccl|libmpi)[^ ]*")
    message(FATAL_ERROR "simulate opened ${CMAKE_MATCH_0}")
  endif()
endif()

if(FUZZ_HELPER)
  execute_process(COMMAND ${BIN} fuzz --list RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "pattern\\.roundtrip")
    message(FATAL_ERROR "hybrid-twin fuzz --list did not reach the fuzz executable (${rc}): ${err}")
  endif()
  execute_process(COMMAND ${BIN} --check-args fuzz --no-such-flag RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "^error: [^\n]*--no-such-flag")
    message(FATAL_ERROR "--check-args fuzz with a bad flag: expected exit 2 naming it, got ${rc}: ${err}")
  endif()
  file(WRITE ${WORK}/check-args.jsonl "[\"fuzz\",\"--cases\",\"3\"]\n[\"fuzz\",\"--no-such-flag\"]\n[\"pattern\",\"M*\"]\n")
  execute_process(COMMAND ${BIN} --check-args-from ${WORK}/check-args.jsonl RESULT_VARIABLE rc OUTPUT_VARIABLE out)
  if(NOT rc EQUAL 1 OR NOT out MATCHES "^ok\nerror: [^\n]*--no-such-flag[^\n]*\nok\n$")
    message(FATAL_ERROR "--check-args-from with fuzz lines: expected ok / error / ok and exit 1, got ${rc}:\n${out}")
  endif()
endif()
