# Worker daemon end-to-end: a real zpipe-coordinator and real zpipe-worker processes on loopback
# training over ZeroPipe's TCP streams.
if(TARGET zpipe-coordinator AND TARGET zpipe-worker AND TARGET zpipe::client)
  zpipe_add_test(NAME worker_e2e_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker/worker_e2e_test.cc
                 ${CMAKE_CURRENT_LIST_DIR}/cli/subprocess.cc
                 DEPS zpipe::client zpipe::proto LABELS worker)
  target_include_directories(worker_e2e_test PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(worker_e2e_test PRIVATE
    ZPIPE_WORKER_BIN="$<TARGET_FILE:zpipe-worker>"
    ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>")
  add_dependencies(worker_e2e_test zpipe-worker zpipe-coordinator)
endif()

# Capability reporting end to end: real coordinator, real worker, the built `zpipe`. The LibTorch
# version CMake finds is the one the worker reports.
if(TARGET zpipe-coordinator AND TARGET zpipe-worker AND TARGET zpipe)
  zpipe_find_torch()
  find_package(nlohmann_json REQUIRED)
  set(nccl_build 0)
  get_property(daemon_nccl GLOBAL PROPERTY ZPIPE_DAEMON_HAS_NCCL)
  if(daemon_nccl)  # the worker daemon links NCCL only with a CUDA LibTorch (worker/daemon.cmake)
    set(nccl_build 1)
  endif()
  zpipe_add_test(NAME worker_capabilities_e2e_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker/capabilities_e2e_test.cc
                 ${CMAKE_CURRENT_LIST_DIR}/cli/subprocess.cc
                 DEPS zpipe::client zpipe::proto nlohmann_json::nlohmann_json GTest::gmock
                 LABELS worker)
  target_include_directories(worker_capabilities_e2e_test PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(worker_capabilities_e2e_test PRIVATE
    ZPIPE_TORCH_VERSION="${Torch_VERSION}" ZPIPE_WITH_NCCL_BUILD=${nccl_build}
    ZPIPE_CLI_BIN="$<TARGET_FILE:zpipe>" ZPIPE_WORKER_BIN="$<TARGET_FILE:zpipe-worker>"
    ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>")
  add_dependencies(worker_capabilities_e2e_test zpipe zpipe-worker zpipe-coordinator)
endif()

# The coordinator's resolved assignments through the worker's edge (in process: both libraries).
if(TARGET zpipe::coordinator AND TARGET zpipe::worker_daemon)
  zpipe_add_test(NAME worker_assignment_edge_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker/assignment_edge_test.cc
                 DEPS zpipe::coordinator zpipe::worker_daemon LABELS worker)
  target_include_directories(worker_assignment_edge_test PRIVATE ${PROJECT_SOURCE_DIR})
endif()

# Python models end to end (model.python; worker/python): a model's exception fails its job with
# the traceback and the worker trains the next one; the factory's errors; the data-roots rule.
# Slow: each case starts a cluster whose workers start Python (about 25 s on two cores).
if(TARGET zpipe-coordinator AND TARGET zpipe-worker AND TARGET zpipe::client AND
   TARGET zpipe_worker_python)
  zpipe_add_test(NAME worker_python_model_e2e_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker/python_model_e2e_test.cc
                 ${CMAKE_CURRENT_LIST_DIR}/cli/subprocess.cc
                 DEPS zpipe::client zpipe::proto GTest::gmock LABELS "worker;slow")
  target_include_directories(worker_python_model_e2e_test PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(worker_python_model_e2e_test PRIVATE
    ZPIPE_WORKER_BIN="$<TARGET_FILE:zpipe-worker>"
    ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>")
  add_dependencies(worker_python_model_e2e_test zpipe-worker zpipe-coordinator)
endif()
