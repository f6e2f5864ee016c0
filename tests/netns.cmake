# A real multi-host run: coordinator and three workers in their own network namespaces (veth pairs
# to a bridge), training over ZeroPipe's TCP streams, then one worker's link taken down mid-job. Needs root and
# iproute2; skips (exit 77) without them. See tests/netns/multihost.sh.
if(TARGET zpipe-coordinator AND TARGET zpipe-worker AND TARGET zpipe)
  add_test(NAME netns_multihost_test
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/netns/multihost.sh $<TARGET_FILE:zpipe-coordinator>
                   $<TARGET_FILE:zpipe-worker> $<TARGET_FILE:zpipe>)
  set_tests_properties(netns_multihost_test PROPERTIES LABELS netns SKIP_RETURN_CODE 77
                       TIMEOUT 180 RUN_SERIAL TRUE)
endif()
