# The worker daemon: coordinator session, rendezvous over gRPC, progress reporting, metrics, main.
# Needs the protocol (proto/); a worker-libraries-only build (ZPIPE_COMPONENTS=worker, as
# scripts/gpu-check makes) stops here.
if(NOT TARGET zpipe::proto)
  return()
endif()
find_package(prometheus-cpp CONFIG REQUIRED)
find_package(nlohmann_json REQUIRED)
zpipe_worker_component(daemon DEPS zpipe::worker_executor zpipe::worker_model zpipe::worker_comm
                       zpipe::worker_comm_factory
                       zpipe::proto zpipe::wire zpipe::artifact zpipe::core zpipe::util ${TORCH_LIBRARIES}
                       absl::status absl::statusor absl::synchronization
                       absl::time absl::strings prometheus-cpp::pull prometheus-cpp::core
                       nlohmann_json::nlohmann_json zpipe::process_metrics TEST_DEPS GTest::gmock)
# Capability reporting (daemon/capabilities.cc) asks the CUDA runtime and NCCL where the NCCL
# communicator is built; ZPIPE_WITH_NCCL comes with it.
if(TARGET zpipe_worker_comm_nccl AND ZPIPE_TORCH_CUDA)
  target_link_libraries(zpipe_worker_daemon PUBLIC zpipe::worker_comm_nccl)
  set_property(GLOBAL PROPERTY ZPIPE_DAEMON_HAS_NCCL ON)
endif()
# Python models (model.python) where the build found an embeddable Python (worker/CMakeLists.txt).
if(ZPIPE_WITH_PYTHON)
  target_link_libraries(zpipe_worker_daemon PUBLIC zpipe::worker_python)
  target_compile_definitions(zpipe_worker_daemon PRIVATE ZPIPE_WITH_PYTHON=1)
endif()
add_executable(zpipe-worker ${CMAKE_CURRENT_SOURCE_DIR}/worker_main.cc)
target_link_libraries(zpipe-worker PRIVATE zpipe_worker_daemon zpipe::flags)
# grpc++'s health service lives in the core library; reflection is not needed here.
