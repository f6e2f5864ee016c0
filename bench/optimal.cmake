# The optimality table (scripts/bench schedules): each schedule's default plan and search plan
# against the exact solver's optimum or proven bound (core/optimal_schedule.h).
add_executable(zpipe_optimal_table ${CMAKE_CURRENT_LIST_DIR}/optimal_table.cc)
find_package(nlohmann_json REQUIRED)
target_link_libraries(zpipe_optimal_table PRIVATE zpipe::core zpipe::flags
                                                  nlohmann_json::nlohmann_json)

# A second certificate's plans through our validator and simulator (bench/mip_bound.py --replay).
add_executable(zpipe_replay_plan ${CMAKE_CURRENT_LIST_DIR}/replay_plan.cc)
target_link_libraries(zpipe_replay_plan PRIVATE zpipe::core nlohmann_json::nlohmann_json)
