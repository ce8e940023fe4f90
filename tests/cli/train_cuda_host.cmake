# `train --backend cuda-host` (the CUDA layer code on the host emulation, no GPU) against
# `train --backend cpu` on a Mamba2 + attention pattern, where every device layer is bitwise to
# the CPU layer on the host: the per-step losses of 3 AdamW steps must be identical.
foreach(backend cpu cuda-host)
  execute_process(COMMAND ${BIN} train --backend ${backend} --pattern "M[*]M*" --steps 3 --batch 2 --seq 24 --json --quiet
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "train --backend ${backend}: exit ${rc}: ${err}")
  endif()
  string(JSON losses_${backend} GET "${out}" losses)
  string(JSON got GET "${out}" backend)
  if(NOT got STREQUAL backend)
    message(FATAL_ERROR "JSON backend ${got}, expected ${backend}")
  endif()
endforeach()
string(JSON n LENGTH "${losses_cpu}")
if(NOT n EQUAL 3 OR NOT losses_cpu STREQUAL losses_cuda-host)
  message(FATAL_ERROR "losses differ: cpu ${losses_cpu} vs cuda-host ${losses_cuda-host}")
endif()
# The device path trains one model: executor flags are refused in one line, exit 2.
execute_process(COMMAND ${BIN} train --backend cuda-host --ep 2 --steps 1 RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "one model on one device")
  message(FATAL_ERROR "train --backend cuda-host --ep 2: exit ${rc}: ${err}")
endif()
