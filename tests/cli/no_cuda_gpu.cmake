# A CUDA command on a machine without a usable CUDA GPU (or a build without the CUDA backend)
# must say so in exactly one stderr line and exit 2, printing nothing on stdout. ARGS: the
# subcommand and its flags, separated by ';'. Where a GPU is present the same test accepts the
# GPU outcome instead: `verify` passing every cpu_vs_cuda row (exit 0), `train` training on the GPU
# (exit 0, its summary table on stdout).
execute_process(COMMAND ${BIN} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 AND out MATCHES "cpu_vs_cuda|\nloss ")
  message(STATUS "a CUDA GPU is present and the command ran on it")
  return()
endif()
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "expected exit code 2, got ${rc}; stderr: ${err}")
endif()
if(NOT err MATCHES "^hybrid-twin: no usable CUDA GPU: [^\n]+\n$")
  message(FATAL_ERROR "expected one line 'hybrid-twin: no usable CUDA GPU: <reason>', got: ${err}")
endif()
if(NOT out STREQUAL "")
  message(FATAL_ERROR "expected nothing on stdout, got: ${out}")
endif()
