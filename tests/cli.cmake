# CLI end-to-end tests: the built `zpipe` against a real zpipe-coordinator, with fake workers.
if(TARGET zpipe-coordinator AND TARGET zpipe)
  find_package(nlohmann_json REQUIRED)
  add_library(zpipe_test_cli_support STATIC
    ${CMAKE_CURRENT_LIST_DIR}/cli/subprocess.cc ${CMAKE_CURRENT_LIST_DIR}/cli/fake_worker.cc)
  target_include_directories(zpipe_test_cli_support PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(zpipe_test_cli_support PUBLIC zpipe::core zpipe::proto zpipe::wire
                        absl::status absl::time)

  zpipe_add_test(NAME cli_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli/cli_test.cc
                 DEPS zpipe_test_cli_support zpipe::client nlohmann_json::nlohmann_json GTest::gmock
                 LABELS cli)
  target_compile_definitions(cli_test PRIVATE
    ZPIPE_CLI_BIN="$<TARGET_FILE:zpipe>" ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>")
  # The test runs both binaries; build them with it.
  add_dependencies(cli_test zpipe zpipe-coordinator)
endif()

# The local `zpipe plan` through the built binary (no coordinator).
if(TARGET zpipe)
  find_package(nlohmann_json REQUIRED)
  zpipe_add_test(NAME cli_plan_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli/plan_cli_test.cc
                         ${CMAKE_CURRENT_LIST_DIR}/cli/subprocess.cc
                 DEPS nlohmann_json::nlohmann_json absl::strings LABELS cli)
  target_include_directories(cli_plan_test PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(cli_plan_test PRIVATE ZPIPE_CLI_BIN="$<TARGET_FILE:zpipe>")
  add_dependencies(cli_plan_test zpipe)
endif()
