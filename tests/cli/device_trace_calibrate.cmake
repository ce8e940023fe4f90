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
# MTP depths are traced on the device too (the device executor runs them): calibrate fits their
# mtp_post nodes and the depths' pre_dispatch.
file(REMOVE ${WORK}/device-mtp.json)
run_json(mtp ${BIN} train --backend cuda-host --pattern "*E/*E" --steps 2 --batch 2 --seq 16
         --trace ${WORK}/device-mtp.json --json --quiet)
run_json(mtp_fit ${BIN} calibrate ${WORK}/device-mtp.json --json)
foreach(key "mtp_post/forward/*E" "mtp_post/backward/*E" "pre_dispatch/forward/*E" "pre_dispatch/backward/*E")
  string(JSON d ERROR_VARIABLE missing GET "${mtp_fit}" durations_us "${key}")
  if(missing OR NOT d GREATER 0)
    message(FATAL_ERROR "the device MTP trace gives no positive duration for ${key}: ${mtp_fit}")
  endif()
endforeach()
