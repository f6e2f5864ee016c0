#include "coordinator/worker_proto.h"

#include "absl/strings/str_cat.h"
#include "coordinator/job_proto.h"

namespace zpipe::coordinator {
namespace {

WorkerCapabilities CapabilitiesFromProto(const v1::WorkerCapabilities& p) {
  WorkerCapabilities c;
  c.libtorch_version = p.libtorch_version();
  c.torch_cuda = p.torch_cuda();
  c.cuda_device_count = p.cuda_device_count();
  c.cuda_runtime_version = p.cuda_runtime_version();
  c.nccl = p.nccl();
  c.nccl_version = p.nccl_version();
  for (const v1::CudaDevice& d : p.devices()) {
    c.devices.push_back({d.index(), d.name(), d.total_memory_bytes()});
  }
  c.probe_error = p.probe_error();
  return c;
}

void CapabilitiesToProto(const WorkerCapabilities& c, v1::WorkerCapabilities* p) {
  p->set_libtorch_version(c.libtorch_version);
  p->set_torch_cuda(c.torch_cuda);
  p->set_cuda_device_count(c.cuda_device_count);
  p->set_cuda_runtime_version(c.cuda_runtime_version);
  p->set_nccl(c.nccl);
  p->set_nccl_version(c.nccl_version);
  for (const CudaDeviceInfo& d : c.devices) {
    v1::CudaDevice* out = p->add_devices();
    out->set_index(d.index);
    out->set_name(d.name);
    out->set_total_memory_bytes(d.total_memory_bytes);
  }
  p->set_probe_error(c.probe_error);
}

}  // namespace

absl::StatusOr<WorkerRegistration> RegistrationFromProto(const v1::RegisterWorkerRequest& p) {
  WorkerRegistration r;
  r.name = p.name();
  switch (p.device_kind()) {
    case v1::DEVICE_KIND_CPU:
      r.device_kind = DeviceKind::kCpu;
      break;
    case v1::DEVICE_KIND_CUDA:
      r.device_kind = DeviceKind::kCuda;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("device_kind: must be CPU or CUDA, got ",
                                                     static_cast<int>(p.device_kind())));
  }
  r.device_index = p.device_index();
  r.host = p.host();
  r.memory_bytes = p.memory_bytes();
  r.version = p.version();
  r.running_job_id = p.running_job_id();
  r.running_pipeline_rank = p.running_pipeline_rank();
  r.running_data_rank = p.running_data_rank();
  r.running_job_finished = p.running_job_finished();
  r.running_job_failed = p.running_job_failed();
  r.instance_id = p.instance_id();
  if (p.has_capabilities()) r.capabilities = CapabilitiesFromProto(p.capabilities());
  return r;
}

v1::Worker WorkerInfoToProto(const WorkerInfo& info) {
  v1::Worker p;
  const WorkerRegistration& r = info.registration;
  p.set_name(r.name);
  p.set_worker_id(info.worker_id);
  p.set_device_kind(DeviceKindToProto(r.device_kind));
  p.set_device_index(r.device_index);
  p.set_host(r.host);
  p.set_memory_bytes(r.memory_bytes);
  p.set_version(r.version);
  if (r.capabilities) CapabilitiesToProto(*r.capabilities, p.mutable_capabilities());
  switch (info.state) {
    case WorkerState::kIdle:
      p.set_state(v1::WORKER_STATE_IDLE);
      break;
    case WorkerState::kBusy:
      p.set_state(v1::WORKER_STATE_BUSY);
      p.set_job_id(info.job_id);
      p.set_pipeline_rank(info.pipeline_rank);
      p.set_data_rank(info.data_rank);
      break;
    case WorkerState::kDead:
      p.set_state(v1::WORKER_STATE_DEAD);
      p.set_reason(info.reason);
      break;
  }
  TimeToProto(info.register_time, p.mutable_register_time());
  TimeToProto(info.last_seen, p.mutable_last_heartbeat_time());
  return p;
}

v1::Assignment AssignmentToProto(const AssignmentData& a) {
  v1::Assignment p;
  p.set_job_id(a.job_id);
  *p.mutable_spec() = SpecToProto(a.spec);
  p.set_attempt(a.attempt);
  p.set_pipeline_rank(a.self.pipeline_rank);
  p.set_data_rank(a.self.data_rank);
  p.set_pipeline_size(a.pipeline_size);
  p.set_data_size(a.data_size);
  p.set_global_rank(a.self.data_rank * a.pipeline_size + a.self.pipeline_rank);
  const JobPlan& plan = *a.plan;
  p.set_plan_text(plan.text);
  p.set_plan_version(plan.version);
  // The model's costs, not a re-plan's measured ones: synthetic stages run exactly these.
  const core::CostModel& cost = plan.model_cost;
  for (int s = 0; s < cost.num_stages(); ++s) {
    v1::StageCostInfo* c = p.add_stage_costs();
    c->set_stage(s);
    c->set_forward_ms(cost.stages[s].f);
    c->set_backward_ms(cost.stages[s].b);
    c->set_weight_ms(cost.stages[s].w);
    c->set_activation_kb(plan.stages[s].activation_kb);
    c->set_params_mb(plan.stages[s].params_mb);
  }
  for (const core::BucketPlan& b : plan.buckets) {
    if (b.rank != a.self.pipeline_rank) continue;
    v1::GradBucket* g = p.add_buckets();
    g->set_chunk(b.chunk);
    g->set_bucket(b.bucket);
    g->set_stage(b.stage);
    g->set_expected_contributions(b.expected_contributions);
    g->set_size_mb(plan.bucket_size_mb);
  }
  for (const RankSlot& slot : a.peers) {
    v1::Peer* peer = p.add_peers();
    peer->set_pipeline_rank(slot.pipeline_rank);
    peer->set_data_rank(slot.data_rank);
    peer->set_global_rank(slot.data_rank * a.pipeline_size + slot.pipeline_rank);
    peer->set_worker_name(slot.worker_name);
    peer->set_host(slot.host);
    peer->set_device_index(slot.device_index);
  }
  p.set_rendezvous_prefix(a.rendezvous_prefix);
  p.set_start_iteration(a.start_iteration);
  return p;
}

void CommandToProto(const WorkerCommand& command, v1::CoordinatorMessage* out) {
  switch (command.kind) {
    case WorkerCommand::Kind::kAssign:
      *out->mutable_assignment() = AssignmentToProto(*command.assignment);
      break;
    case WorkerCommand::Kind::kPlanUpdate: {
      v1::PlanUpdate* u = out->mutable_plan_update();
      u->set_job_id(command.job_id);
      u->set_attempt(command.attempt);
      u->set_plan_version(command.plan->version);
      u->set_plan_text(command.plan->text);
      u->set_switch_iteration(command.switch_iteration);
      break;
    }
    case WorkerCommand::Kind::kCancel:
      out->mutable_cancel()->set_job_id(command.job_id);
      out->mutable_cancel()->set_reason(command.reason);
      break;
    case WorkerCommand::Kind::kShutdown:
      out->mutable_shutdown()->set_reason(command.reason);
      break;
    case WorkerCommand::Kind::kProfile: {
      v1::ProfileRequest* r = out->mutable_profile();
      r->set_job_id(command.assignment->job_id);
      *r->mutable_spec() = SpecToProto(command.assignment->spec);
      r->set_attempt(command.assignment->attempt);
      break;
    }
  }
}

}  // namespace zpipe::coordinator
