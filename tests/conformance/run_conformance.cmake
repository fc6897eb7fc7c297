# Runs one conformance suite with looprun, then checks the result against the committed status
# file. Invoked by CTest with -DLOOPRUN -DSUITE_DIR -DLIST_FILE -DEXPECTED -DPYTHON -DCHECKER.
# looprun exits 1 when some case fails, which is expected: only regressions against EXPECTED count.

execute_process(
  COMMAND ${LOOPRUN} --conformance=${SUITE_DIR} --list_file=${LIST_FILE} --jobs=2 --threads=1
  RESULT_VARIABLE looprun_result)
if(NOT looprun_result EQUAL 0 AND NOT looprun_result EQUAL 1)
  message(FATAL_ERROR "looprun --conformance=${SUITE_DIR} failed (${looprun_result})")
endif()

execute_process(
  COMMAND ${PYTHON} ${CHECKER} --expected=${EXPECTED} --actual=${LIST_FILE}
  RESULT_VARIABLE checker_result)
if(NOT checker_result EQUAL 0)
  message(FATAL_ERROR "conformance regressions against ${EXPECTED} (see above)")
endif()
