"""Client: the coordinator's client API (proto/zpipe/v1/coordinator.proto) from Python.

    import zeropipe
    c = zeropipe.Client("127.0.0.1:50051", token=open("client.token").read().strip())
    job_id = c.submit("examples/synthetic-p8.yaml")
    for event in c.watch(job_id):
        if event["kind"] == "iteration":
            print(event["iteration"]["iteration"], event["iteration"]["bubble_rate"])
    print(c.wait(job_id)["state"])          # "succeeded"

Results are plain dicts (and lists of them) with the proto's field names, which are the names
`zpipe` prints: enum values are the lower-case short names the CLI prints ("running", "idle",
"cpu"; None for an UNSPECIFIED value), 64-bit integers are ints, timestamps RFC 3339 strings
("2024-05-01T12:00:00.250Z"), durations float seconds; every field is present, a message or
`optional` field that is not set is None, and of a oneof only the member that is set appears
(for JobEvent also as "kind": "snapshot", "state_change", "iteration", "plan_switch"
or "progress"). A job's
"spec" dict is the coordinator's, defaults resolved ("data": 1, "optimizer": "adamw", ...;
coordinator/spec_defaults.h), and a valid job spec again: submit(c.status(id)["spec"]) under the
same id is the same job. These are the
objects `zpipe -o json` prints and the coordinator's /api serves (zeropipe/vocabulary.py,
api/json.h; docs/json.md documents every field).

Every failure raises zeropipe.ZeroPipeError (zeropipe/errors.py) with the gRPC status code.

Thread-safety: one Client may be used from several threads (gRPC channels are thread-safe); each
watch() iterator belongs to the thread that iterates it.
"""
import hashlib
import os
import time

import grpc

from zeropipe import config, jobspec, vocabulary
from zeropipe._proto import artifact_pb2
from zeropipe._proto import artifact_pb2_grpc
from zeropipe._proto import coordinator_pb2 as pb
from zeropipe._proto import coordinator_pb2_grpc as pb_grpc
from zeropipe._proto import job_pb2
from zeropipe.errors import ZeroPipeError

DEFAULT_COORDINATOR = "localhost:50051"
_TERMINAL = {"succeeded", "failed", "cancelled"}
# What a broken watch stream may be resumed after (the C++ client's rule, client/grpc_client.cc):
# a lost connection, or a coordinator that cancelled the call while shutting down.
_RESUMABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}
# Uploads read and send files in 1 MiB chunks (the C++ client's size, client/grpc_client.cc): well
# under the coordinator's --max-message-bytes, and only one chunk is held at a time.
_CHUNK_BYTES = 1 << 20
# How a spec names an uploaded file (artifact/artifact_ref.h); a path starting with "artifact:" is
# a reference (well-formed or not: the coordinator judges), never a file to upload.
_ARTIFACT_PREFIX = "artifact:"


# The objects `zpipe -o json` prints (zeropipe/vocabulary.py).
to_dict = vocabulary.to_dict
_spec_to_dict = vocabulary.spec_to_dict
_job_to_dict = vocabulary.job_to_dict
_event_to_dict = vocabulary.event_to_dict


def _read_error(path, e):
    """The ZeroPipeError for a file that cannot be read (artifact/sha256.cc's codes)."""
    code = (grpc.StatusCode.NOT_FOUND if isinstance(e, FileNotFoundError)
            else grpc.StatusCode.PERMISSION_DENIED if isinstance(e, PermissionError)
            else grpc.StatusCode.INTERNAL)
    return ZeroPipeError(code, f"cannot read '{path}': {e.strerror or e}")


def _hash_file(path):
    """(SHA-256 as 64 lower-case hex digits, size in bytes) of the file, read in chunks."""
    digest, size = hashlib.sha256(), 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK_BYTES):
                digest.update(chunk)
                size += len(chunk)
    except OSError as e:
        raise _read_error(path, e) from None
    return digest.hexdigest(), size


def _file_fields(spec):
    """(field name, message, attribute holding the path) for the spec's files a worker reads:
    what `zpipe submit --upload` uploads (artifact.FileFields)."""
    fields = []
    if spec.model.HasField("torchscript"):
        fields.append(("spec.model.torchscript.path", spec.model.torchscript, "path"))
    if spec.model.HasField("python"):
        fields.append(("spec.model.python.file", spec.model.python, "file"))
    if spec.HasField("data"):
        fields.append(("spec.data.path", spec.data, "path"))
    if spec.HasField("eval"):
        fields.append(("spec.eval.path", spec.eval, "path"))
    return fields


def _read(value):
    """PEM text from bytes, a path or None."""
    if value is None or isinstance(value, bytes):
        return value
    with open(os.fspath(value), "rb") as f:
        return f.read()


class Client:
    """A connection to one coordinator.

    address: HOST:PORT; None = $ZPIPE_COORDINATOR, else localhost:50051 (as `zpipe`).
    token:   the client or admin token for a coordinator with token files, sent as
             `authorization: Bearer TOKEN`; None = $ZPIPE_TOKEN; "" = none.
    tls_ca:  talk TLS, verifying the coordinator with this PEM CA (a path, or the PEM as bytes);
             None = $ZPIPE_TLS_CA, else plaintext. tls_cert / tls_key: a client certificate for a
             coordinator that requires one (--tls-client-ca); None = $ZPIPE_TLS_CERT / _KEY.
    timeout: seconds each unary call may take (DEADLINE_EXCEEDED after).
    context: a context of zpipe's config file (zeropipe.config); None = $ZPIPE_CONTEXT, else its
             current-context. Arguments beat the ZPIPE_* environment, which beats the context.
    """

    def __init__(self, address=None, token=None, tls_ca=None, tls_cert=None, tls_key=None,
                 timeout=10.0, context=None):
        settings = config.resolve(address=address, token=token, tls_ca=tls_ca, tls_cert=tls_cert,
                                  tls_key=tls_key, context=context)
        self.address = settings.address
        token = settings.token
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout
        tls_ca, tls_cert, tls_key = settings.tls_ca, settings.tls_cert, settings.tls_key
        if (tls_cert is None) != (tls_key is None):
            raise ZeroPipeError(grpc.StatusCode.INVALID_ARGUMENT,
                                "tls_cert and tls_key go together: give both or neither")
        # The C++ client's channel settings: no receive limit (plans of large pipelines exceed
        # the 4 MiB default) and quick reconnects after a coordinator (re)start.
        options = [("grpc.max_receive_message_length", -1),
                   ("grpc.initial_reconnect_backoff_ms", 100),
                   ("grpc.max_reconnect_backoff_ms", 1000),
                   ("grpc.dns_min_time_between_resolutions_ms", 100)]
        try:
            if tls_ca is not None or tls_cert is not None:
                credentials = grpc.ssl_channel_credentials(
                    root_certificates=_read(tls_ca), private_key=_read(tls_key),
                    certificate_chain=_read(tls_cert))
                self._channel = grpc.secure_channel(self.address, credentials, options)
            else:
                self._channel = grpc.insecure_channel(self.address, options)
        except OSError as e:
            raise ZeroPipeError(grpc.StatusCode.INVALID_ARGUMENT,
                                f"cannot read a TLS file: {e.filename}: {e.strerror}") from None
        self._stub = pb_grpc.CoordinatorServiceStub(self._channel)
        self._artifact_stub = artifact_pb2_grpc.ArtifactServiceStub(self._channel)

    def close(self):
        """Closes the channel; calls after this fail."""
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request, timeout=None):
        try:
            return method(request, timeout=timeout or self._timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise ZeroPipeError.from_rpc(e, self.address) from None

    # --- jobs ---

    def submit(self, spec, job_id=None, upload=False):
        """Submits a job and returns its id.

        spec: a dict, a job file's path, or YAML or JSON text (zeropipe/jobspec.py; the same
        rules as `zpipe submit FILE`). job_id: 1..64 of [a-z0-9._-]; makes the submit
        idempotent (the same id and spec again is harmless, a different spec under it raises
        ALREADY_EXISTS); None = the coordinator picks one. A bad spec raises INVALID_ARGUMENT
        with `field` naming the field.

        upload=True (`zpipe submit --upload`): first sends the files the spec names that the
        workers read (model.torchscript.path or model.python.file, data.path, eval.path) to the
        coordinator with upload_artifact, and submits the spec naming them as
        "artifact:sha256:<hex>", so workers that share no folder with this program can run the
        job. The paths are this machine's: a
        job file's relative paths are taken relative to its folder, a dict's or text's relative
        to the current directory; a path that already is an artifact reference is left as it
        is. A failed upload raises before anything is submitted, with `field` naming the field
        and the message the file (e.g. RESOURCE_EXHAUSTED for files over the coordinator's
        --artifact-max-job-bytes, UNAVAILABLE from a coordinator without --artifact-dir).
        """
        spec = jobspec.load_spec(spec)
        if upload:
            uploaded = job_pb2.JobSpec()
            uploaded.CopyFrom(spec)  # a JobSpec passed in stays the caller's, unchanged
            spec = uploaded
            for field, msg, attr in _file_fields(spec):
                path = getattr(msg, attr)
                if not path or path.startswith(_ARTIFACT_PREFIX):
                    continue
                try:
                    sha256, size = _hash_file(path)
                except ZeroPipeError as e:
                    raise ZeroPipeError(e.code, f"{field}: {e.message}", field) from None
                try:
                    setattr(msg, attr, self._upload(path, sha256, size)["ref"])
                except ZeroPipeError as e:
                    raise ZeroPipeError(e.code, f"{field}: uploading '{path}': {e.message}",
                                        field) from None
        request = pb.SubmitJobRequest(job_id=job_id or "", spec=spec)
        return self._call(self._stub.SubmitJob, request).job.id

    def upload_artifact(self, path):
        """Sends the file at `path` to the coordinator's artifact store (UploadArtifact,
        proto/zpipe/v1/artifact.proto) and returns {ref: "artifact:sha256:<hex>", the name a job
        spec's model.torchscript.path, model.python.file, data.path or eval.path may give it;
        size: its bytes; created: False when the coordinator already held it, which it says
        after the first chunk, so the rest is not sent}.

        The file is read twice in 1 MiB chunks, never whole: once to compute its SHA-256, which
        the first message claims, then to send it. No deadline: a large file takes as long as it
        takes. Needs a client or admin token. Raises NOT_FOUND / PERMISSION_DENIED / INTERNAL
        naming the file when it cannot be read; the coordinator's INVALID_ARGUMENT (the file
        changed while it was sent: a size or digest other than the one claimed, both named),
        RESOURCE_EXHAUSTED (over its --artifact-max-job-bytes) or UNAVAILABLE (a coordinator
        started without --artifact-dir, or none reachable).
        """
        path = os.fspath(path)
        sha256, size = _hash_file(path)
        return self._upload(path, sha256, size)

    def _upload(self, path, sha256, size):
        # What the C++ client sends (GrpcClient::UploadArtifact): the first message carries the
        # claimed sha256 and size and the first chunk (none for an empty file), the others one
        # chunk each. A coordinator that already holds the artifact answers at once; the chunks
        # not yet sent are then never read.
        try:
            f = open(path, "rb")
        except OSError as e:
            raise _read_error(path, e) from None
        read_error = []

        def chunks():
            # Runs on gRPC's sending thread: an exception here would end the call as UNKNOWN, so a
            # read error stops the stream (the coordinator refuses the short upload and stores
            # nothing) and is raised below instead.
            first = True
            while True:
                try:
                    data = f.read(_CHUNK_BYTES)
                except ValueError:  # closed below: the call ended (an early answer)
                    return
                except OSError as e:
                    read_error.append(_read_error(path, e))
                    return
                if first or data:
                    yield artifact_pb2.UploadArtifactRequest(
                        sha256=sha256 if first else "", size=size if first else 0, data=data)
                    first = False
                if not data:
                    return

        try:
            response = self._artifact_stub.UploadArtifact(chunks(), metadata=self._metadata)
        except grpc.RpcError as e:
            if read_error:
                raise read_error[0] from None
            raise ZeroPipeError.from_rpc(e, self.address) from None
        finally:
            f.close()
        if read_error:
            raise read_error[0]
        return to_dict(response)

    def validate(self, spec):
        """Validates and plans a spec without creating a job (`zpipe submit --dry-run`); returns
        the predicted plan statistics (span_ms: the longest per-rank span, makespan_ms: first
        start to last end over all ranks, bubble_rate, ...)."""
        request = pb.SubmitJobRequest(spec=jobspec.load_spec(spec), validate_only=True)
        return to_dict(self._call(self._stub.SubmitJob, request).job.predicted)

    def status(self, job_id):
        """The job's record (`zpipe status ID`): id, spec, state, reason, progress, ..."""
        return _job_to_dict(self._call(self._stub.GetJob, pb.GetJobRequest(job_id=job_id)))

    def list(self, states=None, labels=None, since=None):
        """Every job, oldest first (`zpipe list`), optionally only those in `states` (names such
        as "running", or one name), carrying every one of `labels` (a dict, `zpipe list -l
        team=nlp`) and created within `since` (a timedelta or seconds: `zpipe list --since 1h`).
        The coordinator filters before paging. Jobs come without per-microbatch progress."""
        if isinstance(states, str):
            states = [states]
        numbers = []
        for name in states or ():
            value = job_pb2.JobState.DESCRIPTOR.values_by_name.get(
                "JOB_STATE_" + str(name).upper())
            if value is None or value.number == 0:
                raise ZeroPipeError(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"unknown job state '{name}' (one of: pending, scheduling, "
                                    "running, succeeded, failed, cancelled)", "states")
            numbers.append(value.number)
        created_after_ns = None
        if since is not None:
            seconds = since.total_seconds() if hasattr(since, "total_seconds") else float(since)
            created_after_ns = int((time.time() - seconds) * 1e9)
        jobs, token = [], ""
        while True:
            request = pb.ListJobsRequest(states=numbers, label_selector=dict(labels or {}),
                                         page_size=1000, page_token=token)
            if created_after_ns is not None:
                request.created_after.FromNanoseconds(created_after_ns)
            page = self._call(self._stub.ListJobs, request)
            jobs.extend(_job_to_dict(job) for job in page.jobs)
            token = page.next_page_token
            if not token:
                return jobs

    def cancel(self, job_id, reason=""):
        """Cancels a PENDING, SCHEDULING or RUNNING job and returns its record; cancelling a
        cancelled job returns it unchanged, a finished one raises FAILED_PRECONDITION."""
        return _job_to_dict(self._call(self._stub.CancelJob,
                                       pb.CancelJobRequest(job_id=job_id, reason=reason)))

    def delete(self, job_id, force=False):
        """Deletes a finished job with its history, trace and logs (`zpipe delete ID`) and
        returns the state it was deleted in ("succeeded", "failed", "cancelled"). A job that has
        not finished raises FAILED_PRECONDITION unless `force`, which cancels it first."""
        response = self._call(self._stub.DeleteJob,
                              pb.DeleteJobRequest(job_id=job_id, force=force))
        return job_pb2.JobState.Name(response.state)[len("JOB_STATE_"):].lower()

    def watch(self, job_id, progress_interval_ms=0, reconnect_timeout=30.0, timeout=None):
        """Yields the job's events until it ends (`zpipe watch ID`): first a "snapshot" (the job
        record), then "state_change", "iteration" (a summary once every rank finished one),
        "plan_switch" (re-planning from measured costs, schedule.replan_every) and "progress"
        events; the last is the state_change into the terminal state. A stream lost
        after the first event is resumed where it left off for up to `reconnect_timeout`
        seconds; `timeout` bounds the whole watch (DEADLINE_EXCEEDED). Closing the iterator
        ends the call."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last_sequence, delivered, retry_until = 0, False, None
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise ZeroPipeError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                    f"job {job_id} did not end within {timeout} s")
            request = pb.WatchJobRequest(job_id=job_id, after_sequence=last_sequence,
                                         progress_interval_ms=progress_interval_ms)
            call = self._stub.WatchJob(request, timeout=remaining, metadata=self._metadata)
            try:
                for event in call:
                    # A resumed stream replays state changes and summaries after last_sequence
                    # (or restarts with a snapshot); progress repeats the last sequence by design.
                    replay = (delivered and event.sequence <= last_sequence
                              and event.WhichOneof("kind") in ("state_change", "iteration",
                                                               "plan_switch"))
                    if replay:
                        continue
                    last_sequence = max(last_sequence, event.sequence)
                    delivered = True
                    retry_until = None
                    yield _event_to_dict(event)
                return
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and deadline is not None:
                    raise ZeroPipeError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                        f"job {job_id} did not end within {timeout} s") from None
                if e.code() not in _RESUMABLE or not delivered:
                    raise ZeroPipeError.from_rpc(e, self.address) from None
                now = time.monotonic()
                retry_until = retry_until or now + reconnect_timeout
                if now >= retry_until:
                    raise ZeroPipeError(grpc.StatusCode.UNAVAILABLE,
                                        f"watch of job {job_id} lost the coordinator at "
                                        f"{self.address}: {e.details()}") from None
                time.sleep(0.2)
            finally:
                call.cancel()

    def wait(self, job_id, timeout=None):
        """Blocks until the job ends and returns its final record; check ["state"] ("succeeded",
        "failed", "cancelled") and ["reason"]. timeout: seconds, None = forever; passing it
        raises DEADLINE_EXCEEDED (the job keeps running)."""
        events = self.watch(job_id, progress_interval_ms=1000, timeout=timeout)
        try:
            for event in events:
                if event["kind"] == "snapshot" and event["snapshot"]["state"] in _TERMINAL:
                    return event["snapshot"]
        finally:
            events.close()
        return self.status(job_id)

    def trace(self, job_id, iteration=None):
        """The executed timeline of one iteration (`zpipe trace`; default the latest complete
        one), all ranks on the coordinator's clock, beside the plan's predicted timeline:
        iteration, schedule, start_time, ranks[] and predicted[] of {pipeline_rank, data_rank,
        worker_name, clock_offset, actions[] of {kind, stage, microbatch, peer, chunk, bucket,
        start, end}} (seconds from start_time), available_iterations, complete."""
        request = pb.GetTraceRequest(job_id=job_id)
        if iteration is not None:
            request.iteration = iteration
        return to_dict(self._call(self._stub.GetTrace, request))

    def logs(self, job_id, rank=None, follow=False, tail=0, since=None, reconnect_timeout=30.0):
        """The log lines the job's workers wrote while they ran it (`zpipe logs ID`), oldest
        first, each a dict {time (RFC 3339, worker clock), rank (data_rank * p + pipeline_rank;
        -1 for the coordinator's line about the whole job, one per iteration with loss, eval loss,
        tokens/s and bubble), pipeline_rank, data_rank, text, sequence}. rank: only that global rank (INVALID_ARGUMENT
        with field "rank" for one the job does not have); tail: only the last N lines held;
        since: only lines written at or after this datetime (or POSIX seconds).

        follow=False returns a list; follow=True returns an iterator that yields lines as they
        arrive and ends once the job has ended (a stream lost meanwhile is resumed after the last
        line for up to `reconnect_timeout` seconds; closing the iterator ends the call)."""
        request = pb.GetJobLogsRequest(job_id=job_id, follow=follow, tail=tail)
        if rank is not None:
            request.rank = rank
        if since is not None:
            if hasattr(since, "timestamp"):
                since = since.timestamp()
            request.since.FromNanoseconds(int(since * 1e9))
        lines = self._log_lines(request, reconnect_timeout)
        return lines if follow else list(lines)

    def _log_lines(self, request, reconnect_timeout):
        delivered, retry_until = False, None
        while True:
            timeout = None if request.follow else self._timeout
            call = self._stub.GetJobLogs(request, timeout=timeout, metadata=self._metadata)
            try:
                for response in call:
                    for line in response.lines:
                        request.after_sequence = max(request.after_sequence, line.sequence)
                        delivered, retry_until = True, None
                        yield to_dict(line)
                return
            except grpc.RpcError as e:
                if not request.follow or e.code() not in _RESUMABLE or not delivered:
                    raise ZeroPipeError.from_rpc(e, self.address) from None
                now = time.monotonic()
                retry_until = retry_until or now + reconnect_timeout
                if now >= retry_until:
                    raise ZeroPipeError(grpc.StatusCode.UNAVAILABLE,
                                        f"logs of job {request.job_id} lost the coordinator at "
                                        f"{self.address}: {e.details()}") from None
                request.tail = 0  # the first stream applied it
                time.sleep(0.2)
            finally:
                call.cancel()

    def plan(self, job_id):
        """The plan the coordinator made for the job (`zpipe plan --job ID`): schedule,
        plan_text, ranks[] of {pipeline_rank, text, num_actions}, predicted, layout."""
        return to_dict(self._call(self._stub.GetPlan, pb.GetPlanRequest(job_id=job_id)))

    # --- workers ---

    def workers(self, include_dead=False):
        """Registered workers by name (`zpipe workers`; include_dead=True adds those lost
        recently, as --all): name,
        state ("idle", "busy", "dead"), device_kind, device_index, host, memory_bytes, job_id,
        pipeline_rank, data_rank, last_heartbeat_time, capabilities, ..."""
        workers, token = [], ""
        while True:  # every page (the coordinator serves at most 1000 workers a call)
            page = self._call(self._stub.ListWorkers,
                              pb.ListWorkersRequest(include_dead=include_dead, page_size=1000,
                                                    page_token=token))
            workers.extend(to_dict(w) for w in page.workers)
            token = page.next_page_token
            if not token:
                return workers
