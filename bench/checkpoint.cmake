# Checkpoint stall benchmark (scripts/bench checkpoint): how long a checkpoint holds up the
# training loop, sync vs background writes, for the example jobs. Built only on request.
if(TARGET zpipe_worker_daemon)
  zpipe_find_torch()
  add_executable(zpipe_checkpoint_bench EXCLUDE_FROM_ALL ${CMAKE_CURRENT_LIST_DIR}/checkpoint_bench.cc)
  target_link_libraries(zpipe_checkpoint_bench PRIVATE zpipe::flags zpipe::worker_daemon zpipe::worker_executor
                        zpipe::worker_model zpipe::worker_comm zpipe::core absl::status
                        absl::statusor absl::strings)
endif()
