# Re-planning from measured costs end to end (tests/coordinator/replan_e2e_test.cc): a real
# coordinator and real workers; a synthetic job whose W slows mid-job switches plans on every
# rank at one iteration and measures a lower bubble than the same job without re-planning.
# RUN_SERIAL: it compares measured bubbles, which other tests competing for the cores distort.
if(TARGET zpipe-coordinator AND TARGET zpipe-worker AND TARGET zpipe::client)
  add_executable(replan_e2e_test ${CMAKE_CURRENT_LIST_DIR}/coordinator/replan_e2e_test.cc
                 ${CMAKE_CURRENT_LIST_DIR}/cli/subprocess.cc)
  target_link_libraries(replan_e2e_test PRIVATE zpipe::client zpipe::proto GTest::gtest
                        GTest::gtest_main)
  target_include_directories(replan_e2e_test PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(replan_e2e_test PRIVATE
    ZPIPE_WORKER_BIN="$<TARGET_FILE:zpipe-worker>"
    ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>")
  add_dependencies(replan_e2e_test zpipe-worker zpipe-coordinator)
  gtest_discover_tests(replan_e2e_test DISCOVERY_TIMEOUT 60 PROPERTIES RUN_SERIAL TRUE TIMEOUT 600)
  zpipe_label_discovered_tests(replan_e2e_test "coordinator;slow")
endif()
