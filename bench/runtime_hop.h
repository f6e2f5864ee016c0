// Per-hop cost (scripts/bench runtime hop): one activation hand-over between two processes on
// loopback, through each layer of the runtime's data path, beside the layers below it:
//
//   tcp        a plain TCP socket (blocking write/read, TCP_NODELAY): the floor
//   comm       the communicator (ZeroPipe's TCP streams) Send/Recv with the receive posted
//              ahead, the handle waited
//   executor   two Executors running a ping-pong plan (F s0 -> SEND_ACT -> F s1, B s1 ->
//              SEND_GRAD -> B s0) with stages that compute nothing; the hop is half the time
//              from F s0's end to B s0's start on rank 0, as the executor's own records say
//
// A round trip is two hops; each table row gives the one-way time (round trip / 2) p50, p99 and
// mean over the rounds, for 64 KiB, 256 KiB and 4 MiB. The peer is this executable re-run as
// `hop-peer DIR` (rendezvous through a FileStore in DIR).
#ifndef ZPIPE_BENCH_RUNTIME_HOP_H_
#define ZPIPE_BENCH_RUNTIME_HOP_H_

#include <string>

namespace zpipe::bench {

// Rank 0: starts the peer process, measures, prints the table. Returns a process exit code.
int RunHopBench(int rounds);

// Rank 1, the process RunHopBench starts: `dir` is the rendezvous directory.
int RunHopPeer(const std::string& dir, int rounds);

}  // namespace zpipe::bench

#endif  // ZPIPE_BENCH_RUNTIME_HOP_H_
