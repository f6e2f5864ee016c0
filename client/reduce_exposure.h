// Where a traced iteration's exposed reduce time went.
//
// A bucket's all-reduce completes only once every data-parallel replica has started it, so when
// the replicas drift apart the faster one's reduce waits for the slower one; if its compute is
// done by then, that wait is exposed although nothing about the schedule or the gradient sync
// could have hidden it. This splits the exposed reduce time of one traced iteration (GetTrace,
// clocks aligned by the coordinator) into that replica wait and the rest.
#ifndef ZPIPE_CLIENT_REDUCE_EXPOSURE_H_
#define ZPIPE_CLIENT_REDUCE_EXPOSURE_H_

#include "zpipe/v1/coordinator.pb.h"

namespace zpipe::cli {

struct ReduceExposure {
  int reductions = 0;    // REDUCE events in the trace (all ranks)
  double reduce_s = 0;   // their wall time, summed over ranks
  double exposed_s = 0;  // the part that overlapped none of the same rank's compute
  // Of exposed_s: the part before the last replica started the same bucket's all-reduce
  // (same pipeline rank, chunk and bucket), i.e. waiting for a slower replica.
  double replica_wait_s = 0;
};

// Over the executed ranks of `trace`; all zero when it holds no REDUCE events.
ReduceExposure AnalyzeReduceExposure(const v1::GetTraceResponse& trace);

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_REDUCE_EXPOSURE_H_
