# Scale by simulation (scripts/bench scale): the coordinator binary against thousands of simulated
# workers; and its smoke run in the suite (64 workers, 4 jobs, 3 s: every job succeeds, no worker
# declared dead), so that a change that breaks the bench is seen before someone measures.
if(TARGET zpipe-coordinator)
  add_executable(zpipe_scale_bench ${CMAKE_CURRENT_LIST_DIR}/scale_bench.cc)
  target_include_directories(zpipe_scale_bench PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(zpipe_scale_bench PRIVATE zpipe::flags zpipe::client zpipe::core
                        zpipe::proto zpipe::wire absl::strings absl::str_format
                        absl::synchronization absl::time)
  target_compile_definitions(zpipe_scale_bench PRIVATE
    ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>")
  add_dependencies(zpipe_scale_bench zpipe-coordinator)
  add_test(NAME bench_scale_smoke
           COMMAND zpipe_scale_bench --sizes 64 --duration 3s --iteration 250ms --flush 50ms
                   --check)
  set_tests_properties(bench_scale_smoke PROPERTIES LABELS "bench" TIMEOUT 120)
endif()
