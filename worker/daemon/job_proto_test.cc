// The worker's edge: an assignment as the coordinator sends it becomes the domain JobConfig; a
// field the coordinator resolves that is missing, an unknown name, a plan that does not parse or
// a rank outside it is an INVALID_ARGUMENT naming what is wrong, never a crash; and what goes out
// (log batches, profile results) is valid proto. tests/worker/assignment_edge_test.cc feeds it
// the coordinator's own resolved specs.
#include "worker/daemon/job_proto.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/planning.h"

namespace zpipe::worker {
namespace {

using ::testing::HasSubstr;

std::string TwoRankPlanText() {
  core::PlanRequest req;
  req.schedule = "1f1b";
  req.pipeline = 2;
  req.microbatches = 4;
  req.inputs = [](const core::Placement& placement) {
    return core::UniformInputs(placement, core::StageCost{1, 1, 1, 1, 0, -1});
  };
  auto planned = core::PlanSchedule(req);
  EXPECT_TRUE(planned.ok()) << planned.status();
  return core::PlanToText(planned->plan);
}

// A GPT job's spec with every default filled in, as the coordinator resolves it
// (coordinator/spec_defaults.h).
zpipe::v1::JobSpec ResolvedGptSpec() {
  zpipe::v1::JobSpec spec;
  spec.set_name("edge");
  auto* gpt = spec.mutable_model()->mutable_gpt();
  gpt->set_layers(4);
  gpt->set_hidden(16);
  gpt->set_heads(2);
  gpt->set_seq_len(8);
  gpt->set_vocab(32);
  spec.mutable_parallel()->set_pipeline(2);
  spec.mutable_parallel()->set_data(1);
  spec.mutable_schedule()->set_kind("1f1b");
  spec.mutable_batch()->set_microbatches(4);
  spec.mutable_batch()->set_microbatch_size(2);
  zpipe::v1::TrainSpec* t = spec.mutable_train();
  t->set_iterations(5);
  t->set_optimizer("adamw");
  t->set_lr(1e-3);
  t->set_seed(7);
  t->set_weight_decay(0.01);
  t->add_betas(0.9);
  t->add_betas(0.999);
  t->set_eps(1e-8);
  t->set_clip_grad_norm(1);
  t->set_precision("fp32");
  t->mutable_lr_schedule()->set_decay("constant");
  spec.mutable_grad_sync()->set_bucket_mb(25);
  spec.mutable_grad_sync()->set_overlap(true);
  spec.mutable_checkpoint()->set_on_error(zpipe::v1::CHECKPOINT_ON_ERROR_FAIL);
  spec.set_device(zpipe::v1::DEVICE_KIND_CPU);
  return spec;
}

zpipe::v1::Assignment Assignment(zpipe::v1::JobSpec spec) {
  zpipe::v1::Assignment a;
  a.set_job_id("job-1");
  *a.mutable_spec() = std::move(spec);
  a.set_attempt(2);
  a.set_pipeline_rank(1);
  a.set_pipeline_size(2);
  a.set_data_rank(0);
  a.set_data_size(1);
  a.set_global_rank(1);
  a.set_plan_text(TwoRankPlanText());
  a.set_plan_version(3);
  a.set_rendezvous_prefix("job-1/a2/");
  a.set_start_iteration(1);
  return a;
}

TEST(JobProtoTest, AResolvedAssignmentBecomesTheDomainJob) {
  zpipe::v1::JobSpec spec = ResolvedGptSpec();
  spec.mutable_data()->set_path("train.bin");
  spec.mutable_data()->set_dtype("uint32");
  spec.mutable_data()->set_seq_len(8);
  spec.mutable_data()->set_shuffle_seed(11);
  spec.mutable_eval()->set_path("eval.bin");
  spec.mutable_eval()->set_every(2);
  spec.mutable_eval()->set_batches(4);
  spec.mutable_checkpoint()->set_every(3);
  spec.mutable_checkpoint()->set_dir("ckpt");
  spec.mutable_checkpoint()->set_keep(2);
  spec.mutable_checkpoint()->set_on_error(zpipe::v1::CHECKPOINT_ON_ERROR_SKIP);
  spec.mutable_train()->set_optimizer("adam");
  spec.mutable_train()->set_precision("bf16");
  spec.mutable_grad_sync()->set_overlap(false);
  absl::StatusOr<JobConfig> job = FromAssignment(Assignment(spec));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->job_id, "job-1");
  EXPECT_EQ(job->attempt, 2);
  EXPECT_EQ(job->rank.pipeline_rank, 1);
  EXPECT_EQ(job->rank.pipeline_size, 2);
  EXPECT_EQ(job->rank.global_rank, 1);
  EXPECT_EQ(job->plan.num_ranks(), 2);
  EXPECT_EQ(job->plan_version, 3);
  EXPECT_EQ(job->rendezvous_prefix, "job-1/a2/");
  EXPECT_EQ(job->start_iteration, 1);
  const JobSettings& s = job->settings;
  EXPECT_EQ(s.name, "edge");
  EXPECT_EQ(s.schedule, "1f1b");
  ASSERT_TRUE(std::holds_alternative<GptSource>(s.model));
  EXPECT_EQ(std::get<GptSource>(s.model).config.hidden, 16);
  EXPECT_EQ(s.model_json, R"({"gpt":{"layers":4,"hidden":16,"heads":2,"seq_len":8,"vocab":32}})");
  EXPECT_EQ(s.device, DeviceKind::kCpu);
  EXPECT_EQ(s.microbatch_size, 2);
  EXPECT_EQ(s.seq_len, 8);
  ASSERT_TRUE(s.data.has_value());
  EXPECT_EQ(s.data->dtype, "uint32");
  EXPECT_EQ(s.data->shuffle_seed, 11u);
  ASSERT_TRUE(s.eval.has_value());
  EXPECT_EQ(s.eval->every, 2);
  EXPECT_EQ(s.eval->batches, 4);
  EXPECT_EQ(s.train.optimizer, Optimizer::kAdam);
  EXPECT_EQ(s.train.precision, Precision::kBf16);
  EXPECT_EQ(s.train.seed, 7u);
  EXPECT_DOUBLE_EQ(s.train.weight_decay, 0.01);
  EXPECT_EQ(s.train.beta2, 0.999);
  EXPECT_EQ(s.train.eps, 1e-8);
  ASSERT_TRUE(s.train.lr_schedule.has_value());
  EXPECT_EQ(s.train.lr_schedule->decay, LrSchedule::Decay::kConstant);
  EXPECT_EQ(s.grad_sync.bucket_mb, 25);
  EXPECT_FALSE(s.grad_sync.overlap);
  ASSERT_TRUE(s.checkpoint.has_value());
  EXPECT_EQ(s.checkpoint->dir, "ckpt");
  EXPECT_EQ(s.checkpoint->keep, 2);
  EXPECT_TRUE(s.checkpoint->skip_errors);
}

TEST(JobProtoTest, CheckpointingOffLeavesNoCheckpointConfigAndSgdNeedsNoBetas) {
  zpipe::v1::JobSpec spec = ResolvedGptSpec();
  spec.mutable_checkpoint()->set_dir("/anywhere");  // every 0: never touched
  spec.mutable_train()->set_optimizer("sgd");
  spec.mutable_train()->clear_betas();
  spec.mutable_train()->clear_eps();
  spec.mutable_train()->set_weight_decay(0);
  absl::StatusOr<JobSettings> s = JobSettingsFromProto(spec);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->checkpoint.has_value());
  EXPECT_EQ(s->train.optimizer, Optimizer::kSgd);
  EXPECT_FALSE(s->train.beta1.has_value());
  EXPECT_EQ(s->seq_len, 8) << "the GPT model's, without a data section";
}

TEST(JobProtoTest, EveryUnresolvedFieldIsRefusedByName) {
  struct Case {
    std::string field;
    std::function<void(zpipe::v1::JobSpec&)> unset;
  };
  const std::vector<Case> cases = {
      {"spec.train.optimizer", [](auto& s) { s.mutable_train()->clear_optimizer(); }},
      {"spec.train.weight_decay", [](auto& s) { s.mutable_train()->clear_weight_decay(); }},
      {"spec.train.betas", [](auto& s) { s.mutable_train()->clear_betas(); }},
      {"spec.train.eps", [](auto& s) { s.mutable_train()->clear_eps(); }},
      {"spec.train.clip_grad_norm", [](auto& s) { s.mutable_train()->clear_clip_grad_norm(); }},
      {"spec.train.precision", [](auto& s) { s.mutable_train()->clear_precision(); }},
      {"spec.train.lr_schedule.decay",
       [](auto& s) { s.mutable_train()->mutable_lr_schedule()->clear_decay(); }},
      {"spec.grad_sync.bucket_mb", [](auto& s) { s.mutable_grad_sync()->clear_bucket_mb(); }},
      {"spec.grad_sync.overlap", [](auto& s) { s.mutable_grad_sync()->clear_overlap(); }},
      {"spec.device", [](auto& s) { s.set_device(zpipe::v1::DEVICE_KIND_UNSPECIFIED); }},
      {"spec.checkpoint.on_error",
       [](auto& s) {
         s.mutable_checkpoint()->set_every(1);
         s.mutable_checkpoint()->clear_on_error();
       }},
      {"spec.data.dtype", [](auto& s) { s.mutable_data()->set_path("train.bin"); }},
      {"spec.eval.batches",
       [](auto& s) {
         s.mutable_data()->set_path("train.bin");
         s.mutable_data()->set_dtype("uint16");
         s.mutable_data()->set_seq_len(8);
         s.mutable_eval()->set_path("eval.bin");
         s.mutable_eval()->set_every(1);
       }},
      {"spec.batch.microbatch_size", [](auto& s) { s.mutable_batch()->clear_microbatch_size(); }},
      {"spec.train.lr", [](auto& s) { s.mutable_train()->clear_lr(); }},
      {"spec.model", [](auto& s) { s.mutable_model()->Clear(); }},
  };
  for (const Case& c : cases) {
    zpipe::v1::JobSpec spec = ResolvedGptSpec();
    c.unset(spec);
    absl::StatusOr<JobConfig> job = FromAssignment(Assignment(spec));
    ASSERT_FALSE(job.ok()) << c.field;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(job.status().message(), HasSubstr("assignment: " + c.field)) << job.status();
  }
}

TEST(JobProtoTest, UnknownNamesAreRefusedByName) {
  zpipe::v1::JobSpec spec = ResolvedGptSpec();
  spec.mutable_train()->set_optimizer("lbfgs");
  absl::StatusOr<JobSettings> s = JobSettingsFromProto(spec);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(),
              HasSubstr("spec.train.optimizer: unknown optimizer 'lbfgs' (expected sgd, adam or "
                        "adamw)"));
  spec = ResolvedGptSpec();
  spec.mutable_train()->set_precision("fp16");
  EXPECT_THAT(JobSettingsFromProto(spec).status().message(),
              HasSubstr("spec.train.precision: unknown precision 'fp16'"));
  spec = ResolvedGptSpec();
  spec.mutable_train()->mutable_lr_schedule()->set_decay("step");
  EXPECT_THAT(JobSettingsFromProto(spec).status().message(), HasSubstr("spec.train.lr_schedule: "));
}

TEST(JobProtoTest, ABadPlanOrRankIsRefusedAtTheEdge) {
  zpipe::v1::Assignment a = Assignment(ResolvedGptSpec());
  a.set_plan_text("not a plan");
  EXPECT_THAT(FromAssignment(a).status().message(), HasSubstr("assignment: plan: "));
  a = Assignment(ResolvedGptSpec());
  a.set_pipeline_rank(5);
  EXPECT_THAT(FromAssignment(a).status().message(),
              HasSubstr("assignment: pipeline rank 5 is not in the plan"));
  a = Assignment(ResolvedGptSpec());
  a.set_data_rank(1);
  EXPECT_THAT(FromAssignment(a).status().message(), HasSubstr("assignment: data_rank is 1"));
  a = Assignment(ResolvedGptSpec());
  a.set_data_size(0);
  EXPECT_THAT(FromAssignment(a).status().message(), HasSubstr("assignment: data_size"));
}

TEST(JobProtoTest, ASyntheticModelTakesEveryStagesCostsFromTheAssignment) {
  zpipe::v1::JobSpec spec = ResolvedGptSpec();
  auto* synthetic = spec.mutable_model()->mutable_synthetic();
  synthetic->set_forward_ms(1);
  synthetic->set_param_tensors(3);
  synthetic->mutable_w_slowdown()->set_after_iteration(2);
  synthetic->mutable_w_slowdown()->set_factor(1.5);
  zpipe::v1::Assignment a = Assignment(spec);
  EXPECT_THAT(FromAssignment(a).status().message(), HasSubstr("assignment: stage_costs has 0"));
  for (int s = 0; s < 2; ++s) {
    zpipe::v1::StageCostInfo* c = a.add_stage_costs();
    c->set_stage(s);
    c->set_forward_ms(1 + s);
    c->set_params_mb(0.5);
  }
  absl::StatusOr<JobConfig> job = FromAssignment(a);
  ASSERT_TRUE(job.ok()) << job.status();
  const auto& source = std::get<SyntheticSource>(job->settings.model);
  ASSERT_EQ(source.stage_costs.size(), 2u);
  EXPECT_EQ(source.stage_costs[1].forward_ms, 2);
  EXPECT_EQ(source.param_tensors, 3);
  ASSERT_TRUE(source.w_slowdown.has_value());
  EXPECT_EQ(source.w_slowdown->after_iteration, 2);
  EXPECT_EQ(job->settings.seq_len, 0);
}

TEST(JobProtoTest, ATorchScriptModelNeedsItsDataSection) {
  zpipe::v1::JobSpec spec = ResolvedGptSpec();
  spec.mutable_model()->mutable_torchscript()->set_path("model.pt");
  spec.mutable_model()->mutable_torchscript()->add_cuts(2);
  EXPECT_THAT(JobSettingsFromProto(spec).status().message(), HasSubstr("spec.data is required"));
  spec.mutable_data()->set_path("train.bin");
  spec.mutable_data()->set_dtype("uint16");
  spec.mutable_data()->set_seq_len(16);
  absl::StatusOr<JobSettings> s = JobSettingsFromProto(spec);
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& ts = std::get<TorchScriptSource>(s->model);
  EXPECT_EQ(ts.path, "model.pt");
  EXPECT_EQ(ts.cuts, std::vector<int>{2});
  EXPECT_EQ(s->seq_len, 16);
  EXPECT_EQ(s->model_json, R"({"torchscript":{"path":"model.pt","cuts":[2]}})");
}

// A Python model converts to its domain source; the factory and the compile mode are the
// coordinator's to resolve, so empty ones are refused naming the field, and like TorchScript it
// needs a token file.
TEST(JobProtoTest, APythonModelConvertsWithItsFactoryResolved) {
  zpipe::v1::JobSpec spec = ResolvedGptSpec();
  auto* py = spec.mutable_model()->mutable_python();
  py->set_file("/models/model.py");
  py->set_args(R"({"n_layer":2})");
  py->add_cuts(1);
  py->add_cuts(3);
  EXPECT_THAT(JobSettingsFromProto(spec).status().message(),
              HasSubstr("spec.model.python.factory is unset"));
  py->set_factory("build");
  EXPECT_THAT(JobSettingsFromProto(spec).status().message(),
              HasSubstr("spec.model.python.compile is unset"));
  py->set_compile("traced");
  EXPECT_THAT(JobSettingsFromProto(spec).status().message(),
              HasSubstr("spec.model.python.compile: unknown compile mode 'traced'"));
  py->set_compile("trace");
  EXPECT_THAT(JobSettingsFromProto(spec).status().message(), HasSubstr("spec.data is required"));
  spec.mutable_data()->set_path("train.bin");
  spec.mutable_data()->set_dtype("uint16");
  spec.mutable_data()->set_seq_len(16);
  absl::StatusOr<JobSettings> s = JobSettingsFromProto(spec);
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& source = std::get<PythonSource>(s->model);
  EXPECT_EQ(source.file, "/models/model.py");
  EXPECT_EQ(source.factory, "build");
  EXPECT_EQ(source.args_json, R"({"n_layer":2})");
  EXPECT_EQ(source.cuts, (std::vector<int>{1, 3}));
  EXPECT_EQ(source.compile, python::CompileMode::kTrace);
  EXPECT_EQ(s->model_json,
            R"({"python":{"file":"/models/model.py","factory":"build","args":"{\"n_layer\":2}",)"
            R"("cuts":[1,3],"compile":"trace"}})");
}

TEST(JobProtoTest, LogBatchesGoOutAsValidProto) {
  JobLog log(10);
  log.Begin("j", 2, 1);
  log.Write(absl::FromUnixMillis(1'700'000'000'250), "ok\n\xfe\xfe");
  const zpipe::v1::WorkerMessage m = LogBatchToProto(*log.Take());
  std::string wire;
  ASSERT_TRUE(m.SerializeToString(&wire));
  zpipe::v1::WorkerMessage back;
  ASSERT_TRUE(back.ParseFromString(wire)) << "a proto3 string must be UTF-8 to parse";
  const zpipe::v1::JobLogBatch& b = back.log();
  EXPECT_EQ(b.job_id(), "j");
  EXPECT_EQ(b.pipeline_rank(), 2);
  EXPECT_EQ(b.data_rank(), 1);
  ASSERT_EQ(b.lines_size(), 2);
  EXPECT_EQ(b.lines(1).text(), "??");
  EXPECT_EQ(b.lines(0).time().seconds(), 1'700'000'000);
  EXPECT_EQ(b.lines(0).time().nanos(), 250'000'000);
}

TEST(JobProtoTest, PlanUpdatesAndProfileResultsConvert) {
  zpipe::v1::PlanUpdate u;
  u.set_job_id("j");
  u.set_attempt(3);
  u.set_plan_version(4);
  u.set_switch_iteration(9);
  u.set_plan_text("text");
  const PlanUpdate d = PlanUpdateFromProto(u);
  EXPECT_EQ(d.attempt, 3);
  EXPECT_EQ(d.plan_version, 4);
  EXPECT_EQ(d.switch_iteration, 9);
  EXPECT_EQ(d.plan_text, "text");
  JobProfile profile;
  core::BlockCost block;
  block.w_ms = 3;
  profile.blocks.push_back(block);
  profile.checkpoint_cuts = {2};
  const zpipe::v1::ProfileResult r = ProfileResultToProto("j", 5, profile);
  EXPECT_EQ(r.job_id(), "j");
  EXPECT_EQ(r.attempt(), 5);
  ASSERT_EQ(r.blocks_size(), 1);
  EXPECT_EQ(r.blocks(0).weight_ms(), 3);
  EXPECT_EQ(r.checkpoint_cuts_size(), 1);
  EXPECT_TRUE(r.error().empty());
}

}  // namespace
}  // namespace zpipe::worker
