# The Python stage call's per-action cost against TorchScript's (scripts/bench peer --python runs
# it). Where the worker has Python models; built only on request (EXCLUDE_FROM_ALL).
if(TARGET zpipe_worker_python)
  zpipe_find_torch()
  add_executable(zpipe_python_stage_bench EXCLUDE_FROM_ALL
                 ${CMAKE_CURRENT_LIST_DIR}/python_stage_bench.cc)
  target_link_libraries(zpipe_python_stage_bench PRIVATE zpipe::worker_python zpipe::flags
                        absl::strings)
endif()
