# Executed timelines (GetTrace, `zpipe trace`, the live page): a real zpipe-coordinator and real
# zpipe-worker processes on loopback.
if(TARGET zpipe-coordinator AND TARGET zpipe-worker AND TARGET zpipe)
  find_package(nlohmann_json REQUIRED)
  zpipe_add_test(NAME trace_e2e_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/trace/trace_e2e_test.cc
                 ${CMAKE_CURRENT_LIST_DIR}/cli/subprocess.cc
                 DEPS zpipe::client zpipe::proto nlohmann_json::nlohmann_json LABELS trace)
  target_include_directories(trace_e2e_test PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(trace_e2e_test PRIVATE
    ZPIPE_WORKER_BIN="$<TARGET_FILE:zpipe-worker>"
    ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>"
    ZPIPE_CLI_BIN="$<TARGET_FILE:zpipe>")
  add_dependencies(trace_e2e_test zpipe-worker zpipe-coordinator zpipe)

  zpipe_add_test(NAME trace_live_page_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/trace/live_page_test.cc
                 ${CMAKE_CURRENT_LIST_DIR}/cli/subprocess.cc
                 DEPS zpipe::client zpipe::proto LABELS trace)
  target_include_directories(trace_live_page_test PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(trace_live_page_test PRIVATE
    ZPIPE_WORKER_BIN="$<TARGET_FILE:zpipe-worker>"
    ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>")
  add_dependencies(trace_live_page_test zpipe-worker zpipe-coordinator)
endif()
