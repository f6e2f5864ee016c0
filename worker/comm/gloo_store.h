// Adapter: Gloo's rendezvous store interface on top of a zpipe KeyValueStore.
//
// Gloo contexts bootstrap (connectFullMesh) through a gloo::rendezvous::Store; this one forwards
// to the job's KeyValueStore under a per-group key prefix, so the coordinator's per-job
// rendezvous serves Gloo without an extra service. Gloo's interface reports errors by throwing:
// a KeyValueStore error becomes gloo::IoException, a timeout a `GlooStoreTimeout` (a subclass).
#ifndef ZPIPE_WORKER_COMM_GLOO_STORE_H_
#define ZPIPE_WORKER_COMM_GLOO_STORE_H_

#include <gloo/common/error.h>
#include <gloo/rendezvous/store.h>

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "worker/comm/key_value_store.h"

namespace zpipe::worker {

struct GlooStoreTimeout : public gloo::IoException {
  explicit GlooStoreTimeout(const std::string& msg) : gloo::IoException(msg) {}
};

// `store` must outlive the adapter. `default_timeout` bounds wait() and get() calls that carry
// no timeout of their own (get() blocks until the key exists, like Gloo's own stores).
std::unique_ptr<gloo::rendezvous::Store> NewGlooStore(KeyValueStore& store, std::string prefix,
                                                      absl::Duration default_timeout);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_COMM_GLOO_STORE_H_
