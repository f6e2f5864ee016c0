# Runtime benchmarks (scripts/bench runtime): executor fidelity vs the simulator, gradient-reduce
# overlap, GPT tokens/s. Needs the worker libraries (LibTorch). Built only on request
# (EXCLUDE_FROM_ALL), so the normal build and scripts/test do not pay for it.
if(TARGET zpipe_worker_executor)
  # The worker's imported Torch targets are directory-scoped; find them here too.
  zpipe_find_torch()
  add_executable(zpipe_runtime_bench EXCLUDE_FROM_ALL ${CMAKE_CURRENT_LIST_DIR}/runtime_bench.cc
                                    ${CMAKE_CURRENT_LIST_DIR}/runtime_hop.cc)
  target_link_libraries(zpipe_runtime_bench PRIVATE zpipe::flags zpipe::worker_executor zpipe::worker_model
                        zpipe::worker_comm zpipe::worker_grad_sync zpipe::core
                        absl::status absl::statusor absl::strings)
  # The reporting table measures the daemon's progress reporting and metrics where it is built.
  if(TARGET zpipe_worker_daemon)
    find_package(prometheus-cpp CONFIG REQUIRED)
    target_link_libraries(zpipe_runtime_bench PRIVATE zpipe_worker_daemon prometheus-cpp::core)
    target_compile_definitions(zpipe_runtime_bench PRIVATE ZPIPE_BENCH_WITH_DAEMON)
  endif()
endif()
