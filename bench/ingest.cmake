# Progress-ingestion benchmark (scripts/bench ingest): needs the coordinator binary it drives.
if(TARGET zpipe-coordinator)
  add_executable(zpipe_ingest_bench ${CMAKE_CURRENT_LIST_DIR}/ingest_bench.cc)
  target_link_libraries(zpipe_ingest_bench PRIVATE zpipe::flags zpipe::client zpipe::core zpipe::proto
                        zpipe::wire absl::strings absl::str_format)
  target_compile_definitions(zpipe_ingest_bench PRIVATE
    ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>")
  add_dependencies(zpipe_ingest_bench zpipe-coordinator)
endif()
