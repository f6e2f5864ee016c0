# tests/bench: smoke runs of the benchmarks that print tables, so that a change that breaks one
# is seen before someone sits down to measure. Labels: bench;slow.
#
# bench_peer_smoke: `scripts/bench peer --quick` (bench/peer/peer_bench.py): one row, ZeroPipe's
# ZB-V against torch.distributed.pipelining's ScheduleZBVZeroBubble on the own-model GPT, p = 2;
# the table has both frameworks' columns and the first losses agree within 1e-5. About a minute
# on 2 cores. Needs the interpreter scripts/find-python finds (torch with torch.distributed).
if(TARGET zpipe AND TARGET zpipe-worker AND TARGET zpipe-coordinator)
  add_test(NAME bench_peer_smoke
           COMMAND bash -c "py=$(scripts/find-python) && exec \"$py\" tests/bench/peer_smoke_test.py --zpipe $<TARGET_FILE:zpipe> -v"
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(bench_peer_smoke PROPERTIES LABELS "bench;slow" TIMEOUT 600
                       ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
endif()

# bench_plan_smoke: `scripts/bench plan` (the whole zpipe process under hyperfine) with two runs a
# row: the table is whole; times are not asserted. A few seconds. Skipped without hyperfine/jq.
if(TARGET zpipe)
  add_test(NAME bench_plan_smoke
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/bench/plan_smoke.sh $<TARGET_FILE:zpipe>)
  set_tests_properties(bench_plan_smoke PROPERTIES LABELS bench TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
