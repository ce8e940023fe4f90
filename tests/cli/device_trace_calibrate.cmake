# `train --backend cuda-host --trace` (the CUDA code path on the host emulation): the traced step
# is written as the one-rank sequential plan's nodes, `calibrate` fits a duration for every
# compute node type of that plan from it, and the calibrated twin predicts an EP 2 overlapped step.
include(${CMAKE_CURRENT_LIST_DIR}/run_json.cmake)
set(trace ${WORK}/device-trace.json)
file(REMOVE ${trace})
run_json(run ${BIN} train --backend cuda-host --pattern "M[*E]-G" --steps 3 --batch 2 --seq 16 --trace ${trace} --json --quiet)
string(JSON traced GET "${run}" trace)
if(NOT EXISTS ${trace} OR NOT traced STREQUAL trace)
  message(FATAL_ERROR "no trace written: ${run}")
endif()
run_json(fit ${BIN} calibrate ${trace} -o ${WORK}/device-fit.json --model-out ${WORK}/device-model.json --json)
foreach(key "pre_process/forward" "pre_dispatch/forward/M" "pre_dispatch/forward/*E" "mlp/forward/E" "mlp/forward/-"
            "pre_dispatch/forward/G" "post_process/forward" "post_process/backward" "pre_dispatch/backward/G"
            "mlp/backward/-" "mlp/backward/E" "pre_dispatch/backward/*E" "pre_dispatch/backward/M" "pre_process/backward")
  string(JSON d ERROR_VARIABLE missing GET "${fit}" durations_us "${key}")
  if(missing OR NOT d GREATER 0)
    message(FATAL_ERROR "the device trace gives no positive duration for ${key}: ${fit}")
  endif()
endforeach()
string(JSON platform GET "${fit}" _platform)
run_json(pred ${BIN} simulate --pattern "M[*E]-G" --model ${WORK}/device-model.json --ep 2 --dp 2 --microbatches 4
         --platform ${platform} --costs ${WORK}/device-fit.json --overlap --json)
string(JSON step GET "${pred}" step_time_s)
if(NOT step GREATER 0)
  message(FATAL_ERROR "no predicted step time: ${pred}")
endif()
# MTP depths are not traced on the device yet: one line, exit 2, no file.
file(REMOVE ${WORK}/device-mtp.json)
execute_process(COMMAND ${BIN} train --backend cuda-host --pattern "*E/*E" --steps 1 --batch 2 --seq 16
                        --trace ${WORK}/device-mtp.json --quiet RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "tracing MTP depths on the device is not supported yet" OR EXISTS ${WORK}/device-mtp.json)
  message(FATAL_ERROR "MTP trace on the device: exit ${rc}: ${err}")
endif()
