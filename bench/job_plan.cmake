# How long the coordinator takes to make a job's plan (PlanJob with the search jobs run),
# at job shapes with uneven, profiled-like stage costs (docs/design.md, "Planning time").
if(TARGET zpipe::coordinator)
  add_executable(zpipe_job_plan_time ${CMAKE_CURRENT_LIST_DIR}/job_plan_time.cc)
  target_link_libraries(zpipe_job_plan_time PRIVATE zpipe::coordinator)
endif()
