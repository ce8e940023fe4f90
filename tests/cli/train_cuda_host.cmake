# `train --backend cuda-host` (the CUDA layer code and the device AdamW on the host emulation, no
# GPU) against `train --backend cpu` on a Mamba2 + attention pattern, where every device layer is
# bitwise to the CPU layer on the host: the per-step losses of 3 AdamW steps must be identical;
# and a checkpoint written from the device (weights and moments downloaded) resumes on the CPU
# and on the device with the losses of an uninterrupted CPU run; data-parallel ranks sharing the
# device give the CPU executor's losses.
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
# The main head's part of the loss beside an MTP depth's (HybridModel's LossBreakdown::lm on the
# CPU; the device executor's main head): equal, and below the total.
foreach(backend cpu cuda-host)
  execute_process(COMMAND ${BIN} train --backend ${backend} --pattern "M[*]*/*" --steps 2 --batch 2 --seq 24 --json --quiet
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "train --backend ${backend} with MTP: exit ${rc}: ${err}")
  endif()
  string(JSON lm_${backend} GET "${out}" lm_losses)
  string(JSON total_${backend} GET "${out}" losses 0)
endforeach()
string(JSON lm0 GET "${lm_cpu}" 0)
if(NOT lm_cpu STREQUAL lm_cuda-host OR NOT lm0 LESS total_cpu)
  message(FATAL_ERROR "lm losses: cpu ${lm_cpu} vs cuda-host ${lm_cuda-host} (total ${total_cpu})")
endif()
set(args --pattern "M[*]M*" --batch 2 --seq 24 --json --quiet)
execute_process(COMMAND ${BIN} train --backend cpu ${args} --steps 4 RESULT_VARIABLE rc OUTPUT_VARIABLE out)
string(JSON straight GET "${out}" losses)
file(REMOVE_RECURSE "${WORK}/cuda_host_ckpt")
execute_process(COMMAND ${BIN} train --backend cuda-host ${args} --steps 2 --checkpoint "${WORK}/cuda_host_ckpt"
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cuda-host --checkpoint: exit ${rc}: ${err}")
endif()
string(JSON want2 GET "${straight}" 2)
string(JSON want3 GET "${straight}" 3)
foreach(backend cpu cuda-host)
  execute_process(COMMAND ${BIN} train --backend ${backend} --resume "${WORK}/cuda_host_ckpt" --batch 2 --seq 24 --steps 2 --json --quiet
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${backend} --resume: exit ${rc}: ${err}")
  endif()
  string(JSON got2 GET "${out}" losses 0)
  string(JSON got3 GET "${out}" losses 1)
  if(NOT got2 STREQUAL want2 OR NOT got3 STREQUAL want3)
    message(FATAL_ERROR "${backend} resumed from the device checkpoint: ${got2} ${got3}, uninterrupted CPU: ${want2} ${want3}")
  endif()
endforeach()
# Data-parallel ranks sharing the device (the device executor, DP 2, EP 1): the CPU executor's
# EP = DP = 2 losses (no SwiGLU layer, so the device code rounds like the CPU's; the gradient sum is
# its all-reduce).
set(dpargs --pattern "M[*]G" --steps 3 --batch 2 --seq 24 --json --quiet)
execute_process(COMMAND ${BIN} train --backend cuda-host --dp 2 ${dpargs} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cuda-host --dp 2: exit ${rc}: ${err}")
endif()
string(JSON dp_losses GET "${out}" losses)
execute_process(COMMAND ${BIN} train --ep 2 ${dpargs} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(JSON ep_losses GET "${out}" losses)
if(NOT dp_losses STREQUAL ep_losses)
  message(FATAL_ERROR "cuda-host --dp 2 losses ${dp_losses} differ from the CPU executor's --ep 2 ${ep_losses}")
endif()
# Checkpoints under the executors: train_executor_checkpoint_test.py.
