// Coordinator to worker: a job spec as a user writes it (defaults left out), validated, resolved
// (coordinator/spec_defaults.h), planned and assigned by the coordinator's own code, is what the
// worker's edge (worker/daemon/job_proto.h) accepts, with the coordinator's resolved values.
// Together with the edge refusing an unresolved field, this is what lets the worker keep no
// defaults of its own.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "coordinator/job_proto.h"
#include "coordinator/planner.h"
#include "coordinator/spec_defaults.h"
#include "coordinator/spec_validator.h"
#include "coordinator/worker_connection.h"
#include "coordinator/worker_proto.h"
#include "worker/daemon/job_proto.h"

namespace zpipe {
namespace {

// The assignment of rank (pipeline_rank, 0) of `raw` as the coordinator sends it: the spec
// validated, resolved and planned.
v1::Assignment AssignedByTheCoordinator(const v1::JobSpec& raw, int pipeline_rank = 0) {
  absl::StatusOr<coordinator::JobSpec> spec = coordinator::SpecFromProto(raw);
  EXPECT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(coordinator::ValidateSpecFields(*spec).ok())
      << coordinator::ValidateSpecFields(*spec);
  coordinator::AssignmentData a;
  a.job_id = "edge-job";
  a.spec = coordinator::ResolveSpecDefaults(*spec);
  absl::StatusOr<std::shared_ptr<const coordinator::JobPlan>> plan = coordinator::PlanJob(a.spec);
  EXPECT_TRUE(plan.ok()) << plan.status();
  a.plan = *plan;
  a.attempt = 1;
  a.self.pipeline_rank = pipeline_rank;
  a.pipeline_size = a.spec.pipeline;
  a.data_size = a.spec.data_parallel();
  a.rendezvous_prefix = "edge-job/a1/";
  return coordinator::AssignmentToProto(a);
}

// A GPT job with only the fields a user must give.
v1::JobSpec MinimalGpt() {
  v1::JobSpec spec;
  spec.set_name("edge");
  auto* gpt = spec.mutable_model()->mutable_gpt();
  gpt->set_layers(4);
  gpt->set_hidden(16);
  gpt->set_heads(2);
  gpt->set_seq_len(8);
  gpt->set_vocab(32);
  spec.mutable_parallel()->set_pipeline(2);
  spec.mutable_schedule()->set_kind("1f1b");
  spec.mutable_batch()->set_microbatches(4);
  spec.mutable_batch()->set_microbatch_size(2);
  spec.mutable_train()->set_iterations(3);
  spec.mutable_train()->set_lr(1e-3);
  return spec;
}

TEST(AssignmentEdgeTest, AMinimalSpecArrivesWithTheCoordinatorsDefaults) {
  absl::StatusOr<worker::JobConfig> job =
      worker::FromAssignment(AssignedByTheCoordinator(MinimalGpt(), 1));
  ASSERT_TRUE(job.ok()) << job.status();
  const worker::JobSettings& s = job->settings;
  EXPECT_EQ(job->rank.pipeline_rank, 1);
  EXPECT_EQ(job->rank.data_size, 1);
  EXPECT_EQ(s.train.optimizer, worker::Optimizer::kAdamW);
  EXPECT_EQ(s.train.precision, worker::Precision::kFp32);
  EXPECT_DOUBLE_EQ(s.train.weight_decay, 0.01);
  EXPECT_EQ(s.train.beta1, 0.9);
  EXPECT_EQ(s.train.beta2, 0.999);
  EXPECT_EQ(s.train.eps, 1e-8);
  EXPECT_EQ(s.train.clip_grad_norm, 1.0);
  EXPECT_EQ(s.grad_sync.bucket_mb, 25);
  EXPECT_TRUE(s.grad_sync.overlap);
  EXPECT_EQ(s.device, worker::DeviceKind::kCpu);
  EXPECT_EQ(s.seq_len, 8);
  EXPECT_FALSE(s.data.has_value());
  EXPECT_FALSE(s.checkpoint.has_value());
}

TEST(AssignmentEdgeTest, EveryKindOfSpecTheCoordinatorResolvesIsAccepted) {
  const std::vector<std::pair<std::string, std::function<void(v1::JobSpec&)>>> variants = {
      {"sgd", [](v1::JobSpec& s) { s.mutable_train()->set_optimizer("sgd"); }},
      {"adam bf16",
       [](v1::JobSpec& s) {
         s.mutable_train()->set_optimizer("adam");
         s.mutable_train()->set_precision("bf16");
       }},
      {"token data, eval and checkpoints",
       [](v1::JobSpec& s) {
         s.mutable_data()->set_path("train.bin");
         s.mutable_eval()->set_path("eval.bin");
         s.mutable_eval()->set_every(2);
         s.mutable_checkpoint()->set_every(1);
         s.mutable_checkpoint()->set_dir("ckpt");
       }},
      {"lr schedule and data parallelism",
       [](v1::JobSpec& s) {
         s.mutable_train()->mutable_lr_schedule()->set_warmup(1);
         s.mutable_train()->mutable_lr_schedule()->set_decay("cosine");
         s.mutable_parallel()->set_data(2);
       }},
      {"synthetic",
       [](v1::JobSpec& s) {
         auto* m = s.mutable_model()->mutable_synthetic();
         m->set_forward_ms(1);
         m->set_backward_ms(1);
         m->set_weight_ms(1);
         m->set_params_mb(1);
         m->mutable_w_slowdown()->set_after_iteration(1);
         m->mutable_w_slowdown()->set_factor(2);
       }},
      {"torchscript",
       [](v1::JobSpec& s) {
         s.mutable_model()->mutable_torchscript()->set_path("model.pt");
         s.mutable_model()->mutable_torchscript()->add_cuts(2);
         s.mutable_data()->set_path("train.bin");
         s.mutable_data()->set_seq_len(8);
       }},
      {"python, factory left to its default",
       [](v1::JobSpec& s) {
         s.mutable_model()->mutable_python()->set_file("model.py");
         s.mutable_model()->mutable_python()->set_args(R"({"layers": 2})");
         s.mutable_data()->set_path("train.bin");
         s.mutable_data()->set_seq_len(8);
       }},
  };
  for (const auto& [name, change] : variants) {
    v1::JobSpec spec = MinimalGpt();
    change(spec);
    absl::StatusOr<worker::JobConfig> job = worker::FromAssignment(AssignedByTheCoordinator(spec));
    EXPECT_TRUE(job.ok()) << name << ": " << job.status();
  }
}

TEST(AssignmentEdgeTest, APythonModelsFactoryIsTheCoordinatorsDefault) {
  v1::JobSpec spec = MinimalGpt();
  spec.mutable_model()->mutable_python()->set_file("model.py");
  spec.mutable_data()->set_path("train.bin");
  spec.mutable_data()->set_seq_len(8);
  absl::StatusOr<worker::JobConfig> job = worker::FromAssignment(AssignedByTheCoordinator(spec));
  ASSERT_TRUE(job.ok()) << job.status();
  const auto& source = std::get<worker::PythonSource>(job->settings.model);
  EXPECT_EQ(source.file, "model.py");
  EXPECT_EQ(source.factory, "build_model");
  EXPECT_EQ(source.args_json, "");
}

}  // namespace
}  // namespace zpipe
