# `zpipe run --local` end to end: the built zpipe starting a real zpipe-coordinator and real
# zpipe-worker processes (synthetic models over the TCP streams on loopback). Label: run.
# RUN_SERIAL: the tests compare measured bubbles and reduce overlap with the simulator's, which
# other tests competing for the cores would distort.
if(TARGET zpipe AND TARGET zpipe-coordinator AND TARGET zpipe-worker)
  find_package(nlohmann_json REQUIRED)
  add_executable(run_test ${CMAKE_CURRENT_LIST_DIR}/run/run_test.cc ${CMAKE_CURRENT_LIST_DIR}/cli/subprocess.cc)
  target_link_libraries(run_test PRIVATE zpipe::core nlohmann_json::nlohmann_json absl::strings GTest::gmock
                        GTest::gtest GTest::gtest_main)
  target_include_directories(run_test PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(run_test PRIVATE
    ZPIPE_CLI_BIN="$<TARGET_FILE:zpipe>"
    ZPIPE_WORKER_BIN="$<TARGET_FILE:zpipe-worker>"
    ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>"
    ZPIPE_RUN_TEST_DIR="${CMAKE_CURRENT_LIST_DIR}/run"
    ZPIPE_EXAMPLES_DIR="${PROJECT_SOURCE_DIR}/examples")
  add_dependencies(run_test zpipe zpipe-worker zpipe-coordinator)
  gtest_discover_tests(run_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS run RUN_SERIAL TRUE TIMEOUT 300)
endif()
