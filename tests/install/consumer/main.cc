// consumer ADDRESS JOB_FILE: reads a job file, submits it to the coordinator at ADDRESS, prints
// the idle workers, the plan's shape and CSV header and the job's final state; exits 0 when the job
// SUCCEEDED.
// Built outside the ZeroPipe tree against the installed package (tests/install/install_test.sh).
#include <cstdio>
#include <iostream>

#include <zeropipe/client/client.h>
#include <zeropipe/client/job_file.h>
#include <zeropipe/core/plan.h>
#include <zeropipe/render/plan_export.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: consumer ADDRESS JOB_FILE\n";
    return 2;
  }
  absl::StatusOr<zpipe::v1::JobSpec> spec = zpipe::LoadJobFile(argv[2]);
  if (!spec.ok()) {
    std::cerr << "job file: " << spec.status() << "\n";
    return 2;
  }
  std::unique_ptr<zpipe::Client> client = zpipe::Client::Create(argv[1]);
  absl::StatusOr<std::vector<zpipe::v1::Worker>> workers = client->Workers();
  if (!workers.ok()) {
    std::cerr << "workers: " << workers.status() << "\n";
    return 1;
  }
  std::cout << "workers " << workers->size() << "\n";

  absl::StatusOr<zpipe::SubmitResult> submitted = client->Submit(*spec, "installed-client");
  if (!submitted.ok()) {
    std::cerr << "submit: " << submitted.status() << "\n";
    return 1;
  }
  absl::StatusOr<zpipe::v1::Job> job = client->WaitForTerminal("installed-client");
  if (!job.ok()) {
    std::cerr << "wait: " << job.status() << "\n";
    return 1;
  }
  absl::StatusOr<zpipe::JobPlan> plan = client->Plan("installed-client");
  if (!plan.ok()) {
    std::cerr << "plan: " << plan.status() << "\n";
    return 1;
  }
  std::cout << "plan ranks " << plan->plan.num_ranks() << " first "
            << zpipe::core::ActionToString(plan->plan.ranks[0].front()) << "\n";
  const std::string csv = zpipe::render::PlanToCsv(plan->plan);
  std::cout << "plan csv " << csv.substr(0, csv.find('\n')) << "\n";
  std::cout << "job " << job->id() << " " << zpipe::JobStateName(job->state()) << "\n";
  return job->state() == zpipe::v1::JOB_STATE_SUCCEEDED ? 0 : 1;
}
