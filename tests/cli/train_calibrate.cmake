# `train` on EP ranks: the overlapped (combined 1F1B, delayed wgrad) run and the sequential run
# of the same grouped model must report the same losses bit for bit (the JSON prints doubles
# round-trip exact), the flattened pattern too; the measured trace must calibrate, and the
# calibrated twin must predict a step time for the overlapped schedule.
set(model --hidden 32 --experts 4 --topk 2 --moe-ffn 32 --ffn 32 --heads 2 --kv-heads 1 --head-dim 16
          --mamba-heads 2 --mamba-head-dim 16 --mamba-state 8 --batch 2 --seq 16 --steps 3 --quiet --json)
include(${CMAKE_CURRENT_LIST_DIR}/run_json.cmake)
set(trace ${WORK}/seq-trace.json)
run_json(seq ${BIN} train --pattern "M[*E][*E]" --ep 2 --microbatches 4 --no-overlap --trace ${trace} ${model})
run_json(ovl ${BIN} train --pattern "M[*E][*E]" --ep 2 --microbatches 4 --overlap --delay-wgrad ${model})
run_json(flat ${BIN} train --pattern "M*E*E" --ep 2 --microbatches 4 --overlap ${model})
string(JSON seq_losses GET "${seq}" losses)
string(JSON ovl_losses GET "${ovl}" losses)
string(JSON flat_losses GET "${flat}" losses)
string(JSON n LENGTH "${seq}" losses)
if(NOT n EQUAL 3)
  message(FATAL_ERROR "expected 3 losses, got ${n}: ${seq_losses}")
endif()
if(NOT seq_losses STREQUAL ovl_losses OR NOT seq_losses STREQUAL flat_losses)
  message(FATAL_ERROR "losses differ:\n sequential ${seq_losses}\n overlapped ${ovl_losses}\n flattened ${flat_losses}")
endif()
string(JSON schedule GET "${ovl}" schedule)
if(NOT schedule STREQUAL "combined_1f1b")
  message(FATAL_ERROR "expected the combined_1f1b schedule, got ${schedule}")
endif()
# Calibrate the sequential trace, then predict the overlapped schedule with the fitted costs.
run_json(fit ${BIN} calibrate ${trace} -o ${WORK}/fit.json --model-out ${WORK}/model.json --json)
string(JSON d GET "${fit}" durations_us "mlp/forward/E")
if(NOT d GREATER 0)
  message(FATAL_ERROR "no positive mlp/forward/E duration in the fit: ${fit}")
endif()
string(JSON platform GET "${fit}" _platform)
run_json(pred ${BIN} simulate --pattern "M[*E][*E]" --model ${WORK}/model.json --ep 2 --dp 2 --microbatches 4
         --platform ${platform} --costs ${WORK}/fit.json --overlap --no-delay-wgrad --json)
string(JSON step GET "${pred}" step_time_s)
if(NOT step GREATER 0)
  message(FATAL_ERROR "no positive predicted step time: ${pred}")
endif()
