# Observability: the coordinator's per-job metrics, dashboards/zeropipe.json, dashboards/rules.yml
# and dashboards/prometheus.yml, checked against real processes and Debian's prometheus/promtool
# (scripts/setup installs them). `ctest -L observability`.
find_program(ZPIPE_PROMETHEUS prometheus)
set(ZPIPE_DASHBOARDS ${PROJECT_SOURCE_DIR}/dashboards)

if(TARGET zpipe-coordinator AND TARGET zpipe-worker AND TARGET zpipe::client)
  find_package(nlohmann_json REQUIRED)
  find_package(yaml-cpp REQUIRED)
  add_library(zpipe_observability_testing STATIC
    ${CMAKE_CURRENT_LIST_DIR}/observability/observability_support.cc
    ${CMAKE_CURRENT_LIST_DIR}/cli/subprocess.cc)
  target_include_directories(zpipe_observability_testing PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(zpipe_observability_testing
    PUBLIC zpipe::client zpipe::proto nlohmann_json::nlohmann_json yaml-cpp absl::strings
           absl::status absl::statusor)
  target_compile_definitions(zpipe_observability_testing PUBLIC
    ZPIPE_WORKER_BIN="$<TARGET_FILE:zpipe-worker>"
    ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>"
    ZPIPE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_dependencies(zpipe_observability_testing zpipe-worker zpipe-coordinator)

  # b. lint (dashboard and rules against what a running coordinator exports)
  zpipe_add_test(NAME observability_lint_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/observability/lint_test.cc
                 DEPS zpipe_observability_testing LABELS observability)
  # a. every panel query through a real Prometheus scraping a real job (fails, saying so, when
  # prometheus is not installed)
  zpipe_add_test(NAME observability_prometheus_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/observability/prometheus_test.cc
                 DEPS zpipe_observability_testing LABELS observability)
  if(NOT ZPIPE_PROMETHEUS)
    set(ZPIPE_PROMETHEUS "")
    message(WARNING "prometheus not found (scripts/setup installs it)")
  endif()
  target_compile_definitions(observability_prometheus_test PRIVATE
    ZPIPE_PROMETHEUS_BIN="${ZPIPE_PROMETHEUS}")
endif()

# c. promtool on the recording and alerting rules, the alerts' unit tests (alerts_test.yml: each
# alert fires on synthetic series and stays quiet on healthy ones) and the scrape config (which
# loads the rules too); found at test time, so a missing promtool fails the tests rather than
# hiding them.
add_test(NAME observability_promtool_rules
         COMMAND promtool check rules ${ZPIPE_DASHBOARDS}/rules.yml)
add_test(NAME observability_promtool_alerts
         COMMAND promtool test rules ${ZPIPE_DASHBOARDS}/alerts_test.yml)
add_test(NAME observability_promtool_config
         COMMAND promtool check config ${ZPIPE_DASHBOARDS}/prometheus.yml)
set_tests_properties(observability_promtool_rules observability_promtool_alerts
                     observability_promtool_config
                     PROPERTIES LABELS observability TIMEOUT 60)
