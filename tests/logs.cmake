# `zpipe logs` end to end: a real zpipe-coordinator and real zpipe-worker processes (LocalCluster)
# run small synthetic jobs; the built zpipe reads the lines the workers forwarded. Label: logs.
if(TARGET zpipe AND TARGET zpipe-coordinator AND TARGET zpipe-worker)
  find_package(nlohmann_json REQUIRED)
  add_executable(logs_test ${CMAKE_CURRENT_LIST_DIR}/logs/logs_test.cc
                           ${CMAKE_CURRENT_LIST_DIR}/cli/subprocess.cc)
  target_link_libraries(logs_test PRIVATE zpipe::cli nlohmann_json::nlohmann_json absl::strings
                        GTest::gmock GTest::gtest GTest::gtest_main)
  target_include_directories(logs_test PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(logs_test PRIVATE
    ZPIPE_CLI_BIN="$<TARGET_FILE:zpipe>"
    ZPIPE_WORKER_BIN="$<TARGET_FILE:zpipe-worker>"
    ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>")
  add_dependencies(logs_test zpipe zpipe-worker zpipe-coordinator)
  gtest_discover_tests(logs_test DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)
  zpipe_label_discovered_tests(logs_test "logs;slow")
endif()
