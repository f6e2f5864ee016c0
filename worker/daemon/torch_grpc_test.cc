// One process holding LibTorch from the PyTorch wheel and Debian's gRPC and Protobuf, as the worker
// does: a TorchScript model is compiled, saved, loaded and run; a real gRPC server and channel
// talk over loopback; a proto is serialised, parsed and printed as text. The wheel links its own
// protobuf (for ONNX) and gloo into libtorch_cpu and ships older google/protobuf headers, so a
// symbol clash or a header mix-up (cmake/torch.cmake puts Torch's includes after the system's)
// shows here as a crash, a link error or a wrong value, not in a job.
#include <google/protobuf/stubs/common.h>
#include <google/protobuf/text_format.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <sstream>
#include <string>

#include "zpipe/v1/coordinator.grpc.pb.h"
#include "zpipe/v1/job.pb.h"

namespace zpipe::worker {
namespace {

// Answers GetJob with a job named after the request, through generated code on both ends.
class EchoCoordinator final : public v1::CoordinatorService::Service {
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* request,
                      v1::Job* job) override {
    job->set_id(request->job_id());
    job->mutable_spec()->set_name("echo");
    return grpc::Status::OK;
  }
};

TEST(TorchGrpcOneProcessTest, ModelChannelAndProtoLiveTogether) {
  // The generated code and the library it runs on are Debian's, not the wheel's 3.13 headers.
  EXPECT_GE(GOOGLE_PROTOBUF_VERSION, 3021000);

  // A TorchScript module, through the archive format a user's model file uses.
  torch::jit::Module m("Doubler");
  m.register_parameter("scale", torch::full({3}, 2.0f), /*is_buffer=*/false);
  m.define("def forward(self, x):\n  return x * self.scale\n");
  std::stringstream archive;
  m.save(archive);
  torch::jit::Module loaded = torch::jit::load(archive);
  torch::Tensor y = loaded.forward({torch::ones({3})}).toTensor();
  EXPECT_TRUE(torch::equal(y, torch::full({3}, 2.0f)));

  // A real gRPC server and a channel to it, and one call.
  EchoCoordinator service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);
  auto stub = v1::CoordinatorService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::GetJobRequest request;
  request.set_job_id("job-7");
  v1::Job job;
  grpc::Status status = stub->GetJob(&context, request, &job);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(job.id(), "job-7");
  EXPECT_EQ(job.spec().name(), "echo");

  // A proto: binary round trip and the text format (the descriptor pool).
  v1::JobSpec spec;
  spec.set_name("one-process");
  spec.mutable_parallel()->set_pipeline(2);
  spec.mutable_model()->mutable_torchscript()->set_path("model.pt");
  v1::JobSpec parsed;
  ASSERT_TRUE(parsed.ParseFromString(spec.SerializeAsString()));
  EXPECT_EQ(parsed.name(), "one-process");
  EXPECT_EQ(parsed.model().torchscript().path(), "model.pt");
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(parsed, &text));
  v1::JobSpec from_text;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &from_text));
  EXPECT_EQ(from_text.parallel().pipeline(), 2);

  server->Shutdown();
}

}  // namespace
}  // namespace zpipe::worker
