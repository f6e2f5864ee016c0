# Split backward benchmark (scripts/bench split): SplitBackward's B + W against a plain backward()
# of a transformer block. Needs LibTorch and Google Benchmark; built only on request
# (EXCLUDE_FROM_ALL).
if(TARGET zpipe_worker_model AND benchmark_FOUND)
  # The worker's imported Torch targets are directory-scoped; find them here too.
  zpipe_find_torch()
  add_executable(zpipe_split_bench EXCLUDE_FROM_ALL ${CMAKE_CURRENT_LIST_DIR}/split_bench.cc)
  target_link_libraries(zpipe_split_bench PRIVATE zpipe::worker_model benchmark::benchmark)
endif()
