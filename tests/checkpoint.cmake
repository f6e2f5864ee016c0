# Checkpointing end to end: a real zpipe-coordinator and real zpipe-worker processes save, find
# and resume checkpoints in a local directory.
if(TARGET zpipe-coordinator AND TARGET zpipe-worker AND TARGET zpipe::client)
  zpipe_add_test(NAME checkpoint_e2e_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker/checkpoint_e2e_test.cc
                 ${CMAKE_CURRENT_LIST_DIR}/cli/subprocess.cc
                 DEPS zpipe::client zpipe::proto LABELS worker)
  target_include_directories(checkpoint_e2e_test PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(checkpoint_e2e_test PRIVATE
    ZPIPE_WORKER_BIN="$<TARGET_FILE:zpipe-worker>"
    ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>")
  add_dependencies(checkpoint_e2e_test zpipe-worker zpipe-coordinator)

  # A checkpoint directory that cannot take the files (a file-size limit on the workers).
  zpipe_add_test(NAME checkpoint_failure_e2e_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker/checkpoint_failure_e2e_test.cc
                 ${CMAKE_CURRENT_LIST_DIR}/cli/subprocess.cc
                 DEPS zpipe::client zpipe::proto LABELS worker)
  target_include_directories(checkpoint_failure_e2e_test PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(checkpoint_failure_e2e_test PRIVATE
    ZPIPE_WORKER_BIN="$<TARGET_FILE:zpipe-worker>"
    ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>")
  add_dependencies(checkpoint_failure_e2e_test zpipe-worker zpipe-coordinator)
endif()

# Recovery: the coordinator killed or stopped under a running job, a worker killed under a job
# with restart.max_restarts and a spare (tests/worker/recovery_e2e_test.cc).
if(TARGET zpipe-coordinator AND TARGET zpipe-worker AND TARGET zpipe::client)
  zpipe_add_test(NAME recovery_e2e_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker/recovery_e2e_test.cc
                 ${CMAKE_CURRENT_LIST_DIR}/cli/subprocess.cc
                 DEPS zpipe::client zpipe::proto LABELS "worker;slow")
  target_include_directories(recovery_e2e_test PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(recovery_e2e_test PRIVATE
    ZPIPE_WORKER_BIN="$<TARGET_FILE:zpipe-worker>"
    ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>")
  add_dependencies(recovery_e2e_test zpipe-worker zpipe-coordinator)
endif()

# Coordinator restarts timed (issue 30): workers re-register within 1 s of its return; SIGTERM
# stops it within 1 s with what it acknowledged stored (tests/worker/reconnect_e2e_test.cc).
if(TARGET zpipe-coordinator AND TARGET zpipe-worker AND TARGET zpipe::client)
  zpipe_add_test(NAME reconnect_e2e_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker/reconnect_e2e_test.cc
                 ${CMAKE_CURRENT_LIST_DIR}/cli/subprocess.cc
                 DEPS zpipe::client zpipe::proto LABELS worker)
  target_include_directories(reconnect_e2e_test PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(reconnect_e2e_test PRIVATE
    ZPIPE_WORKER_BIN="$<TARGET_FILE:zpipe-worker>"
    ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>")
  add_dependencies(reconnect_e2e_test zpipe-worker zpipe-coordinator)
endif()
