# Offline checks of deploy/ (Kubernetes manifests): render, strict schema, rejection fixtures,
# policy, golden files, dashboard sync. No cluster and no C++ target needed; see
# tests/deploy/check.sh. deploy_setup installs the tools (npm ci, kubectl) once before the rest.
set(ZPIPE_DEPLOY_CHECK ${CMAKE_CURRENT_LIST_DIR}/deploy/check.sh)
add_test(NAME deploy_setup COMMAND ${ZPIPE_DEPLOY_CHECK} setup)
set_tests_properties(deploy_setup PROPERTIES FIXTURES_SETUP deploy_tools LABELS deploy TIMEOUT 600)
foreach(check render schema reject policy golden dashboards docker)
  add_test(NAME deploy_${check} COMMAND ${ZPIPE_DEPLOY_CHECK} ${check})
  set_tests_properties(deploy_${check} PROPERTIES FIXTURES_REQUIRED deploy_tools LABELS deploy
                       TIMEOUT 300)
endforeach()
