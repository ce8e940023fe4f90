# `mpirun -np P hybrid-twin train --backend cuda-host --ep N`: the device executor's ranks split over
# P processes (MPI carries the rows on the host emulation) give one process's losses digit for
# digit (EP 2 over 2 processes, EP 4 over 2 processes with 2 ranks each), the JSON names the
# processes, process 1 writes its own trace (NAME.proc1.json, its ranks only) and prints nothing;
# under mpirun the CPU executor and a split that does not divide the ranks are refused in one line.
set(mpirun ${MPIEXEC} --allow-run-as-root --oversubscribe -np)
foreach(case "2;M[*E]M[*E]-;2" "2;[*E]M[*E];4")
  list(GET case 0 np)
  list(GET case 1 pattern)
  list(GET case 2 ep)
  set(args train --backend cuda-host --pattern "${pattern}" --ep ${ep} --microbatches 2 --steps 2 --batch 2 --seq 16
           --json --quiet)
  execute_process(COMMAND ${BIN} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE one ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "one process, EP ${ep}: exit ${rc}: ${err}")
  endif()
  file(REMOVE "${WORK}/mpi_trace.json" "${WORK}/mpi_trace.proc1.json")
  execute_process(COMMAND ${mpirun} ${np} ${BIN} ${args} --trace "${WORK}/mpi_trace.json"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE split ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mpirun -np ${np}, EP ${ep}: exit ${rc}: ${err}")
  endif()
  string(JSON one_losses GET "${one}" losses)
  string(JSON split_losses GET "${split}" losses)
  string(JSON processes GET "${split}" processes)
  string(JSON one_params GET "${one}" parameters)
  string(JSON split_params GET "${split}" parameters)
  if(NOT one_losses STREQUAL split_losses OR NOT processes EQUAL np OR NOT one_params EQUAL split_params)
    message(FATAL_ERROR "EP ${ep} over ${np} processes: losses ${split_losses} vs ${one_losses}, "
                        "parameters ${split_params} vs ${one_params}, processes ${processes}")
  endif()
  foreach(f mpi_trace.json mpi_trace.proc1.json)
    if(NOT EXISTS "${WORK}/${f}")
      message(FATAL_ERROR "mpirun -np ${np}: no ${f}")
    endif()
  endforeach()
  # Process 1's trace holds its ranks (EP/np of them, from rank EP/np on) and none of process 0's.
  file(READ "${WORK}/mpi_trace.proc1.json" trace)
  math(EXPR first "${ep} / ${np}")
  string(FIND "${trace}" "\"pid\":${first}," mine)
  string(FIND "${trace}" "\"pid\":0," theirs)
  if(mine LESS 0 OR NOT theirs EQUAL -1)
    message(FATAL_ERROR "process 1's trace: rank ${first} at ${mine}, rank 0 at ${theirs}")
  endif()
endforeach()

foreach(bad "2;--backend;cpu;--ep;2;under mpirun" "3;--backend;cuda-host;--ep;2;do not divide")
  list(POP_FRONT bad np)
  list(POP_BACK bad expect)
  execute_process(COMMAND ${mpirun} ${np} ${BIN} train ${bad} --steps 1 --quiet
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT err MATCHES "error: [^\n]*${expect}")
    message(FATAL_ERROR "mpirun -np ${np} train ${bad}: exit ${rc}, stderr '${err}'")
  endif()
endforeach()
