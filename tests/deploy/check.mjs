// Offline checks of rendered Kubernetes manifests (the output of `kubectl kustomize`).
//
//   node check.mjs schema FILE...          every object passes strict schema validation
//   node check.mjs reject FILE...          every file holds an object the validator must reject,
//                                          at the path named by its "# expect-error-at:" lines
//   node check.mjs policy [--gpu] [--prod] FILE...
//                                          the ZeroPipe policies (see policyViolations)
//   node check.mjs policy-selftest CPU GPU each policy catches a deliberate break of itself
//   node check.mjs policy-reject FIXTURE RENDERED
//                                          RENDERED (FIXTURE, a kustomization, rendered) breaks
//                                          the policies its "# expect-violation: REGEX" lines
//                                          name; "# policy-flags: --gpu --prod" sets the flags
//
// Schemas come from kubernetes-models (core API) and @kubernetes-models/prometheus-operator
// (ServiceMonitor, PodMonitor, PrometheusRule). Their generated validators check types, enums,
// formats and required fields but ignore unknown fields, which the API server would drop
// silently; "strict" adds that: each field is probed with a value no schema accepts, and a field
// whose probe draws no error at its own path is a field the schema does not know.
import fs from 'node:fs';
import { parseAllDocuments } from 'yaml';

// ---------------------------------------------------------------------------------------------
// Loading

function loadObjects(file) {
  const docs = parseAllDocuments(fs.readFileSync(file, 'utf8'));
  const objects = [];
  for (const doc of docs) {
    if (doc.errors.length > 0) throw new Error(`${file}: YAML error: ${doc.errors[0].message}`);
    const obj = doc.toJS();
    if (obj !== null && obj !== undefined) objects.push(obj);
  }
  return objects;
}

const name = (o) => `${o.kind}/${o.metadata?.name ?? '?'}`;

// ---------------------------------------------------------------------------------------------
// Strict schema validation

async function modelFor(obj) {
  const apiVersion = String(obj.apiVersion ?? '');
  let module;
  if (apiVersion.startsWith('monitoring.coreos.com/')) {
    module = `@kubernetes-models/prometheus-operator/${apiVersion}`;
  } else if (/^[a-z0-9]+$/.test(apiVersion)) {
    module = `kubernetes-models/${apiVersion}`;  // the core group: v1
  } else {
    module = `kubernetes-models/${apiVersion}`;
  }
  let exports;
  try {
    exports = await import(module);
  } catch {
    return null;
  }
  return exports[obj.kind] ?? null;
}

// Runs the generated validator; returns ajv's error list ([] when valid).
function validateWith(Model, obj) {
  try {
    new Model(obj).validate();
    return [];
  } catch (e) {
    if (Array.isArray(e.errors)) return e.errors;
    return [{ instancePath: '', message: String(e.message ?? e) }];
  }
}

const pointer = (parts) => parts.map((p) => '/' + String(p).replace(/~/g, '~0').replace(/\//g, '~1')).join('');

// Every (path, key) of plain-object properties below the root, depth first.
function* objectKeys(value, path = []) {
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) yield* objectKeys(value[i], [...path, i]);
  } else if (value !== null && typeof value === 'object') {
    for (const key of Object.keys(value)) {
      yield [...path, key];
      yield* objectKeys(value[key], [...path, key]);
    }
  }
}

function setAt(root, parts, value) {
  let node = root;
  for (const p of parts.slice(0, -1)) node = node[p];
  node[parts[parts.length - 1]] = value;
}

const NO_SCHEMA_ACCEPTS = Symbol('probe');

// Returns human-readable problems of one object: schema errors, then unknown fields.
export async function schemaProblems(obj) {
  // kustomize's secretGenerator wraps long base64 values over lines; the API server decodes them
  // with Go's base64, which skips newlines, so they are valid (the schema's "byte" format is not).
  if (obj.kind === 'Secret' && obj.data) {
    obj = structuredClone(obj);
    for (const k of Object.keys(obj.data)) if (typeof obj.data[k] === 'string') obj.data[k] = obj.data[k].replace(/[\r\n]/g, '');
  }
  const Model = await modelFor(obj);
  if (!Model) return [`no schema for apiVersion ${obj.apiVersion} kind ${obj.kind}`];
  const under = (errors, at) => errors.some((e) => e.instancePath === at || e.instancePath.startsWith(at + '/'));
  const errors = validateWith(Model, obj);
  const typeProblems = errors.map((e) => `${e.instancePath || '/'}: ${e.message ?? e.keyword}`);
  const unknown = [];
  for (const parts of objectKeys(obj)) {
    if (parts.length === 1 && (parts[0] === 'apiVersion' || parts[0] === 'kind')) continue;
    const at = pointer(parts);
    if (under(errors, at)) continue;  // already reported above
    const probe = structuredClone(obj);
    setAt(probe, parts, NO_SCHEMA_ACCEPTS);
    if (!under(validateWith(Model, probe), at)) unknown.push(at);
  }
  // A parent that is unknown makes all its children unknown too; report the parent only.
  const unknownProblems = unknown
    .filter((at) => !unknown.some((parent) => at.startsWith(parent + '/')))
    .map((at) => `${at}: unknown field "${at.split('/').pop().replace(/~1/g, '/').replace(/~0/g, '~')}"`);
  return [...typeProblems, ...unknownProblems];
}

// ---------------------------------------------------------------------------------------------
// Policy

const WORKLOAD_KINDS = new Set(['Deployment', 'StatefulSet', 'DaemonSet', 'Job', 'CronJob', 'Pod']);
const LONG_RUNNING = new Set(['Deployment', 'StatefulSet', 'DaemonSet']);

function podTemplate(obj) {
  switch (obj.kind) {
    case 'Pod': return { metadata: obj.metadata, spec: obj.spec };
    case 'CronJob': return obj.spec?.jobTemplate?.spec?.template;
    default: return obj.spec?.template;
  }
}

const nsOf = (o) => o.metadata?.namespace ?? '';
const sameNs = (a, b) => nsOf(a) === nsOf(b);

function matchesLabels(selector, labels) {
  // A selector with nothing in it would select everything; treat it as a mistake.
  const matchLabels = selector?.matchLabels ?? {};
  const exprs = selector?.matchExpressions ?? [];
  if (Object.keys(matchLabels).length === 0 && exprs.length === 0) return false;
  for (const [k, v] of Object.entries(matchLabels)) if (labels?.[k] !== v) return false;
  for (const e of exprs) {
    const has = labels && Object.prototype.hasOwnProperty.call(labels, e.key);
    if (e.operator === 'In' && !(has && e.values.includes(labels[e.key]))) return false;
    if (e.operator === 'NotIn' && has && e.values.includes(labels[e.key])) return false;
    if (e.operator === 'Exists' && !has) return false;
    if (e.operator === 'DoesNotExist' && has) return false;
  }
  return true;
}

// Pod templates in `objects` (same namespace as `of`) selected by `selector`.
function selectedPods(objects, of, selector) {
  return objects
    .filter((o) => WORKLOAD_KINDS.has(o.kind) && sameNs(o, of))
    .map((o) => ({ owner: o, pod: podTemplate(o) }))
    .filter(({ pod }) => pod && matchesLabels(selector, pod.metadata?.labels));
}

function portExists(containers, port) {
  return containers.some((c) => (c.ports ?? []).some((p) =>
    (typeof port === 'number' ? p.containerPort === port : p.name === port)));
}

function imageIsPinned(image) {
  if (image.includes('@sha256:')) return true;
  const lastPart = image.split('/').pop();
  const colon = lastPart.lastIndexOf(':');
  if (colon < 0) return false;  // no tag means :latest
  const tag = lastPart.slice(colon + 1);
  return tag !== '' && tag !== 'latest';
}


// --- Tokens and network policy (issue 11) ---------------------------------------------------

// The value of `--flag=VALUE` or `--flag VALUE` in args; undefined when absent.
function flagValue(args, flag) {
  for (let i = 0; i < args.length; i++) {
    if (args[i].startsWith(flag + '=')) return args[i].slice(flag.length + 1);
    if (args[i] === flag) return args[i + 1] ?? '';
  }
  return undefined;
}

// Why `path` (a file a container reads) is not a file of a read-only, non-optional Secret volume
// of `podSpec`; null when it is.
function notOnSecretMount(podSpec, container, path) {
  const mount = (container.volumeMounts ?? [])
    .filter((m) => path.startsWith(m.mountPath.replace(/\/?$/, '/')))
    .sort((a, b) => b.mountPath.length - a.mountPath.length)[0];
  if (!mount) return 'is not on a read-only Secret mount (no volumeMount holds it)';
  const vol = (podSpec.volumes ?? []).find((x) => x.name === mount.name);
  const secrets = vol?.secret ? [vol.secret]
    : (vol?.projected?.sources ?? []).every((src) => src.secret) ? (vol?.projected?.sources ?? []).map((src) => src.secret) : [];
  if (secrets.length === 0) return `is not on a read-only Secret mount (volume ${mount.name} is not a Secret)`;
  if (mount.readOnly !== true) return `is not on a read-only Secret mount (${mount.mountPath} is writable)`;
  if (secrets.some((x) => x.optional === true)) return `is on an optional Secret volume (${mount.name}): the pod would start without it`;
  if (mount.subPath) return `is on a subPath mount (${mount.mountPath}), which never sees the Secret change`;
  const file = path.slice(mount.mountPath.replace(/\/?$/, '/').length);
  const withItems = secrets.filter((x) => x.items);
  if (withItems.length === secrets.length && !withItems.some((x) => x.items.some((it) => it.path === file))) {
    return `is not a file of Secret volume ${mount.name} (its items are ${withItems.flatMap((x) => x.items.map((it) => it.path)).join(', ')})`;
  }
  return null;
}

// Whether a NetworkPolicy's podSelector selects the pod template (an empty selector selects all).
function policySelects(np, pod) {
  const sel = np.spec?.podSelector ?? {};
  if (Object.keys(sel.matchLabels ?? {}).length === 0 && (sel.matchExpressions ?? []).length === 0) return true;
  return matchesLabels(sel, pod?.metadata?.labels);
}

const isEmptySelector = (sel) => sel !== undefined && Object.keys(sel?.matchLabels ?? {}).length === 0 &&
  (sel?.matchExpressions ?? []).length === 0;

// Credentials and network access: see policyViolations.
function securityViolations(objects, { prod }) {
  const v = [];
  // No token as a plain env value anywhere; the zpipe CLI in a pod presents a Secret's token.
  for (const obj of objects.filter((o) => WORKLOAD_KINDS.has(o.kind))) {
    const spec = podTemplate(obj)?.spec ?? {};
    for (const c of [...(spec.initContainers ?? []), ...(spec.containers ?? [])]) {
      const ct = `${name(obj)} container ${c.name}`;
      for (const e of c.env ?? []) {
        if (e.name === 'ZPIPE_TOKEN' && e.value !== undefined) {
          v.push(`${ct}: ZPIPE_TOKEN is a plain env value in the pod spec; use --token-file on a Secret mount (or valueFrom.secretKeyRef)`);
        }
      }
      if ((c.command ?? [])[0] === 'zpipe') {
        const file = flagValue([...(c.command ?? []), ...(c.args ?? [])], '--token-file');
        const fromSecret = (c.env ?? []).some((e) => e.name === 'ZPIPE_TOKEN' && e.valueFrom?.secretKeyRef);
        if (file !== undefined) {
          const why = notOnSecretMount(spec, c, file);
          if (why) v.push(`${ct}: zpipe --token-file ${file} ${why}`);
        } else if (!fromSecret) {
          v.push(`${ct}: zpipe has no client token (--token-file on a Secret mount, or ZPIPE_TOKEN from a secretKeyRef)`);
        }
      }
    }
  }

  // Secrets in the repository are throwaway dev tokens, marked so; a production overlay has none.
  for (const secret of objects.filter((o) => o.kind === 'Secret')) {
    if (prod) {
      v.push(`${name(secret)}: a production overlay ships a Secret; its tokens must come from the user's Secret (kubectl create secret), not the repository`);
    } else if (secret.metadata?.annotations?.['zeropipe.io/throwaway'] !== 'true') {
      v.push(`${name(secret)}: a Secret in the repository must be a throwaway dev one, annotated zeropipe.io/throwaway: "true"`);
    }
  }

  const coordinator = objects.find((o) => o.kind === 'Deployment' && o.metadata?.name === 'zpipe-coordinator');
  const workers = objects.find((o) => o.kind === 'StatefulSet' && o.metadata?.name === 'zpipe-worker');
  if (coordinator) {
    const spec = coordinator.spec?.template?.spec ?? {};
    const c = (spec.containers ?? []).find((x) => x.name === 'coordinator') ?? spec.containers?.[0] ?? {};
    const args = [...(c.command ?? []), ...(c.args ?? [])];
    if (args.some((a) => a === '--insecure' || a.startsWith('--insecure='))) {
      v.push('Deployment/zpipe-coordinator: started with --insecure (every caller trusted); give it token files from a Secret');
    }
    for (const flag of ['--client-tokens', '--worker-tokens', '--admin-tokens']) {
      const file = flagValue(args, flag);
      if (!file) { v.push(`Deployment/zpipe-coordinator: no ${flag} FILE`); continue; }
      const why = notOnSecretMount(spec, c, file);
      if (why) v.push(`Deployment/zpipe-coordinator: ${flag} ${file} ${why}`);
    }
    // TLS: the certificate and its key from a Secret, so tokens never cross the network in clear.
    for (const flag of ['--tls-cert', '--tls-key']) {
      const file = flagValue(args, flag);
      if (!file) { v.push(`Deployment/zpipe-coordinator: no ${flag} FILE (TLS, from a Secret)`); continue; }
      const why = notOnSecretMount(spec, c, file);
      if (why) v.push(`Deployment/zpipe-coordinator: ${flag} ${file} ${why}`);
    }
    // The coordinator's metrics port speaks HTTPS then: its ServiceMonitor must too.
    if (flagValue(args, '--tls-cert')) {
      for (const m of objects.filter((o) => o.kind === 'ServiceMonitor' && o.metadata?.name === 'zpipe-coordinator')) {
        for (const e of m.spec?.endpoints ?? []) {
          if (e.scheme !== 'https' || !e.tlsConfig?.ca) {
            v.push(`ServiceMonitor/zpipe-coordinator: endpoint ${e.port} is not scheme https with a tlsConfig.ca (the coordinator serves HTTPS)`);
          }
        }
      }
    }
  }
  if (workers) {
    const spec = workers.spec?.template?.spec ?? {};
    for (const c of spec.containers ?? []) {
      const file = flagValue([...(c.command ?? []), ...(c.args ?? [])], '--token-file');
      if (!file) { v.push(`StatefulSet/zpipe-worker container ${c.name}: no --token-file (the worker token, from a Secret)`); continue; }
      const why = notOnSecretMount(spec, c, file);
      if (why) v.push(`StatefulSet/zpipe-worker container ${c.name}: --token-file ${file} ${why}`);
      const ca = flagValue([...(c.command ?? []), ...(c.args ?? [])], '--tls-ca');
      if (!ca) { v.push(`StatefulSet/zpipe-worker container ${c.name}: no --tls-ca (the CA of the coordinator's certificate, from a Secret)`); continue; }
      const caWhy = notOnSecretMount(spec, c, ca);
      if (caWhy) v.push(`StatefulSet/zpipe-worker container ${c.name}: --tls-ca ${ca} ${caWhy}`);
    }
  }

  // The coordinator admits only its workers, labelled clients and Prometheus.
  if (coordinator) {
    const pod = coordinator.spec?.template;
    const containers = pod?.spec?.containers ?? [];
    const policies = objects.filter((o) => o.kind === 'NetworkPolicy' && sameNs(o, coordinator) && policySelects(o, pod) &&
      (o.spec?.policyTypes ?? ['Ingress']).includes('Ingress'));
    if (policies.length === 0) v.push('no NetworkPolicy selects the zpipe-coordinator pods for Ingress: anything in the cluster can connect');
    const grpcPorts = new Set(['grpc', 50051]);
    const metricsPorts = new Set(['metrics', 9464]);
    let workersAdmitted = false, prometheusAdmitted = false;
    for (const np of policies) {
      (np.spec?.ingress ?? []).forEach((rule, i) => {
        const at = `${name(np)} ingress[${i}]`;
        if ((rule.from ?? []).length === 0) v.push(`${at}: no "from" admits every source`);
        if ((rule.ports ?? []).length === 0) v.push(`${at}: no "ports" admits every port`);
        for (const p of rule.ports ?? []) {
          if (p.port === undefined || p.endPort !== undefined) v.push(`${at}: a port range or any port is admitted`);
          else if (!portExists(containers, p.port)) v.push(`${at}: port ${p.port} is not a port of the coordinator`);
        }
        for (const peer of rule.from ?? []) {
          if (peer.ipBlock) v.push(`${at}: an ipBlock (${peer.ipBlock.cidr}) admits addresses, not labelled pods`);
          if (isEmptySelector(peer.namespaceSelector)) v.push(`${at}: an empty namespaceSelector admits every namespace`);
          if (!peer.namespaceSelector && isEmptySelector(peer.podSelector)) v.push(`${at}: an empty podSelector admits every pod of the namespace`);
        }
        const ports = (rule.ports ?? []).map((p) => p.port);
        const workerPeer = (rule.from ?? []).some((peer) => !peer.namespaceSelector && !peer.ipBlock &&
          workers && matchesLabels(peer.podSelector, podTemplate(workers)?.metadata?.labels));
        if (workerPeer && ports.some((p) => grpcPorts.has(p))) workersAdmitted = true;
        if ((rule.from ?? []).some((peer) => peer.namespaceSelector && !isEmptySelector(peer.namespaceSelector)) &&
            ports.some((p) => metricsPorts.has(p))) prometheusAdmitted = true;
      });
    }
    if (policies.length > 0 && workers && !workersAdmitted) {
      v.push('the NetworkPolicy for zpipe-coordinator does not admit the zpipe-worker pods to the grpc port');
    }
    if (policies.length > 0 && objects.some((o) => o.kind === 'ServiceMonitor') && !prometheusAdmitted) {
      v.push('the NetworkPolicy for zpipe-coordinator does not admit a (Prometheus) namespace to the metrics port');
    }
  }
  return v;
}

// Volumes the workers mount from PersistentVolumeClaims. Worker pods run on many nodes at once,
// so a claim they share must allow that (ReadOnlyMany or ReadWriteMany, never only
// ReadWriteOnce); a ReadOnlyMany claim is mounted read-only; every such mount lies under one of
// the worker's --data-root folders (else no job may name a file on it). The shared-volume overlay
// must give the workers a read-only data claim and a ReadWriteMany one (checkpoints).
const pathUnder = (path, root) => path === root || path.startsWith(root.replace(/\/$/, '') + '/');
function workerVolumeViolations(objects, workers, { sharedVolume }) {
  const v = [];
  const spec = workers.spec?.template?.spec ?? {};
  const worker = spec.containers?.[0] ?? {};
  const args = worker.args ?? [];
  const roots = args.filter((a) => a.startsWith('--data-root=')).map((a) => a.slice('--data-root='.length));
  const modes = new Set();
  for (const vol of spec.volumes ?? []) {
    const claimName = vol.persistentVolumeClaim?.claimName;
    if (!claimName) continue;
    const where = `StatefulSet/zpipe-worker volume ${vol.name}`;
    const claim = objects.find((o) => o.kind === 'PersistentVolumeClaim' && o.metadata?.name === claimName && sameNs(o, workers));
    if (!claim) { v.push(`${where}: PersistentVolumeClaim ${claimName} is not defined`); continue; }
    const access = claim.spec?.accessModes ?? [];
    access.forEach((m) => modes.add(m));
    if (!access.some((m) => m === 'ReadOnlyMany' || m === 'ReadWriteMany')) {
      v.push(`${where}: claim ${claimName} is ${access.join(', ') || 'without access modes'}; workers on several nodes need ReadOnlyMany or ReadWriteMany`);
    }
    const readOnlyClaim = access.length > 0 && access.every((m) => m === 'ReadOnlyMany');
    const mounts = (worker.volumeMounts ?? []).filter((m) => m.name === vol.name);
    if (mounts.length === 0) v.push(`${where}: claim ${claimName} is not mounted`);
    for (const m of mounts) {
      if (readOnlyClaim && (m.readOnly !== true || vol.persistentVolumeClaim.readOnly !== true)) {
        v.push(`${where}: ReadOnlyMany claim ${claimName} is mounted writable at ${m.mountPath}`);
      }
      if (!roots.some((r) => pathUnder(m.mountPath, r))) {
        v.push(`${where}: ${m.mountPath} is not under a --data-root (${roots.join(', ') || 'none'}), so no job may use it`);
      }
    }
  }
  if (sharedVolume) {
    if (!modes.has('ReadOnlyMany')) v.push('StatefulSet/zpipe-worker: no ReadOnlyMany claim for models and data');
    if (!modes.has('ReadWriteMany')) v.push('StatefulSet/zpipe-worker: no ReadWriteMany claim for checkpoints');
  }
  return v;
}

// Returns one line per violation; [] when every policy holds.
//   gpu: the objects are the GPU overlay (workers must request GPUs).
//   prod: a production overlay (no Secret may be rendered: the user creates it).
//   sharedVolume: the shared-volume overlay (workers' data roots on shared claims).
export function policyViolations(objects, { gpu = false, prod = false, sharedVolume = false } = {}) {
  const v = [];
  const services = objects.filter((o) => o.kind === 'Service');

  for (const obj of objects.filter((o) => WORKLOAD_KINDS.has(o.kind))) {
    const pod = podTemplate(obj);
    const spec = pod?.spec ?? {};
    const podSc = spec.securityContext ?? {};
    const containers = [...(spec.initContainers ?? []), ...(spec.containers ?? [])];
    const tag = name(obj);

    if (obj.spec?.selector && !['Job', 'CronJob', 'Pod'].includes(obj.kind) &&
        !matchesLabels(obj.spec.selector, pod?.metadata?.labels)) {
      v.push(`${tag}: spec.selector does not match its pod template's labels`);
    }
    for (const c of containers) {
      const ct = `${tag} container ${c.name}`;
      const sc = c.securityContext ?? {};
      for (const kind of ['requests', 'limits']) {
        for (const r of ['cpu', 'memory']) {
          if (c.resources?.[kind]?.[r] === undefined) v.push(`${ct}: no resources.${kind}.${r}`);
        }
      }
      if (LONG_RUNNING.has(obj.kind) && (spec.containers ?? []).includes(c)) {
        for (const probe of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
          if (!c[probe]) v.push(`${ct}: no ${probe}`);
        }
        // Liveness over HTTP can be starved by anonymous slow or idle connections, which would
        // get the pod restarted by anyone who reaches the port (issue 30): grpc.health.v1 only,
        // on the port the binary serves it on (--health-listen).
        const live = c.livenessProbe;
        if (live && !live.grpc) v.push(`${ct}: livenessProbe is not a grpc probe`);
        if (live?.grpc) {
          const healthArg = (c.args ?? []).find((a) => String(a).startsWith('--health-listen='));
          const served = healthArg ? Number(String(healthArg).split(':').pop()) : undefined;
          if (served !== live.grpc.port) {
            v.push(`${ct}: livenessProbe port ${live.grpc.port} is not its --health-listen port`);
          }
        }
      }
      for (const probe of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
        const p = c[probe];
        if (!p) continue;
        const port = p.grpc?.port ?? p.httpGet?.port ?? p.tcpSocket?.port;
        if (port !== undefined && !portExists([c], port)) {
          v.push(`${ct}: ${probe} port ${port} is not a port of the container`);
        }
      }
      const nonRoot = sc.runAsNonRoot ?? podSc.runAsNonRoot;
      const uid = sc.runAsUser ?? podSc.runAsUser;
      if (nonRoot !== true) v.push(`${ct}: runAsNonRoot is not true`);
      if (uid === 0) v.push(`${ct}: runAsUser is 0`);
      if (sc.allowPrivilegeEscalation !== false) v.push(`${ct}: allowPrivilegeEscalation is not false`);
      if (!(sc.capabilities?.drop ?? []).includes('ALL')) v.push(`${ct}: capabilities do not drop ALL`);
      if (sc.readOnlyRootFilesystem !== true) v.push(`${ct}: readOnlyRootFilesystem is not true`);
      if (!imageIsPinned(String(c.image ?? ''))) v.push(`${ct}: image ${c.image} is :latest or untagged`);
    }
  }

  // Services select pods, and their target ports exist on those pods.
  for (const svc of services) {
    const pods = selectedPods(objects, svc, svc.spec?.selector && { matchLabels: svc.spec.selector });
    if (pods.length === 0) { v.push(`${name(svc)}: selects no pods`); continue; }
    for (const p of svc.spec?.ports ?? []) {
      const target = p.targetPort ?? p.port;
      for (const { owner, pod } of pods) {
        if (!portExists(pod.spec?.containers ?? [], target)) {
          v.push(`${name(svc)} port ${p.name}: targetPort ${target} is not a port of ${name(owner)}`);
        }
      }
    }
  }

  // StatefulSets are governed by a headless Service that selects their pods.
  for (const sts of objects.filter((o) => o.kind === 'StatefulSet')) {
    const svc = services.find((s) => s.metadata?.name === sts.spec?.serviceName && sameNs(s, sts));
    if (!svc) { v.push(`${name(sts)}: serviceName ${sts.spec?.serviceName} is not a Service here`); continue; }
    if (svc.spec?.clusterIP !== 'None') v.push(`${name(sts)}: Service ${svc.metadata.name} is not headless`);
    if (!matchesLabels({ matchLabels: svc.spec?.selector }, podTemplate(sts)?.metadata?.labels)) {
      v.push(`${name(sts)}: Service ${svc.metadata.name} does not select its pods`);
    }
  }

  // PodDisruptionBudgets cover real pods.
  for (const pdb of objects.filter((o) => o.kind === 'PodDisruptionBudget')) {
    if (selectedPods(objects, pdb, pdb.spec?.selector).length === 0) {
      v.push(`${name(pdb)}: selector matches no pods`);
    }
  }

  // Monitors scrape ports that exist.
  for (const sm of objects.filter((o) => o.kind === 'ServiceMonitor')) {
    const targets = services.filter((s) => sameNs(s, sm) && matchesLabels(sm.spec?.selector, s.metadata?.labels));
    if (targets.length === 0) v.push(`${name(sm)}: selects no Service`);
    for (const ep of sm.spec?.endpoints ?? []) {
      for (const s of targets) {
        if (!(s.spec?.ports ?? []).some((p) => p.name === ep.port)) {
          v.push(`${name(sm)}: port ${ep.port} is not a named port of ${name(s)}`);
        }
      }
    }
  }
  for (const pm of objects.filter((o) => o.kind === 'PodMonitor')) {
    const pods = selectedPods(objects, pm, pm.spec?.selector);
    if (pods.length === 0) v.push(`${name(pm)}: selects no pods`);
    for (const ep of pm.spec?.podMetricsEndpoints ?? []) {
      for (const { owner, pod } of pods) {
        if (!portExists(pod.spec?.containers ?? [], ep.port)) {
          v.push(`${name(pm)}: port ${ep.port} is not a named port of ${name(owner)}`);
        }
      }
    }
  }

  // An overlay that creates a Namespace puts everything in it (nothing strays into "default").
  const namespaces = objects.filter((o) => o.kind === 'Namespace').map((o) => o.metadata?.name);
  if (namespaces.length > 0) {
    for (const o of objects.filter((x) => x.kind !== 'Namespace' && !namespaces.includes(nsOf(x)))) {
      v.push(`${name(o)}: namespace "${nsOf(o)}" is not the overlay's (${namespaces.join(', ')})`);
    }
  }

  // The shape ZeroPipe relies on.
  const coordinator = objects.find((o) => o.kind === 'Deployment' && o.metadata?.name === 'zpipe-coordinator');
  const workers = objects.find((o) => o.kind === 'StatefulSet' && o.metadata?.name === 'zpipe-worker');
  if (coordinator || workers) {
    if (!coordinator) v.push('no Deployment/zpipe-coordinator');
    if (!workers) v.push('no StatefulSet/zpipe-worker');
  }
  if (coordinator) {
    if (coordinator.spec?.replicas !== 1) v.push('Deployment/zpipe-coordinator: replicas is not 1');
    if (coordinator.spec?.strategy?.type !== 'Recreate') v.push('Deployment/zpipe-coordinator: strategy is not Recreate');
    const claims = (coordinator.spec?.template?.spec?.volumes ?? [])
      .map((vol) => vol.persistentVolumeClaim?.claimName).filter(Boolean);
    if (claims.length === 0) v.push('Deployment/zpipe-coordinator: no PersistentVolumeClaim volume');
    for (const claim of claims) {
      if (!objects.some((o) => o.kind === 'PersistentVolumeClaim' && o.metadata?.name === claim && sameNs(o, coordinator))) {
        v.push(`Deployment/zpipe-coordinator: PersistentVolumeClaim ${claim} is not defined`);
      }
    }
    const svc = services.find((s) => s.metadata?.name === 'zpipe-coordinator');
    for (const port of ['grpc', 'metrics']) {
      if (!(svc?.spec?.ports ?? []).some((p) => p.name === port)) v.push(`Service/zpipe-coordinator: no port named ${port}`);
    }
  }
  if (workers) {
    const spec = workers.spec?.template?.spec ?? {};
    if (workers.spec?.podManagementPolicy !== 'Parallel') v.push('StatefulSet/zpipe-worker: podManagementPolicy is not Parallel');
    if (!(spec.terminationGracePeriodSeconds >= 30)) v.push('StatefulSet/zpipe-worker: terminationGracePeriodSeconds under 30');
    const shm = (spec.containers?.[0]?.volumeMounts ?? []).find((m) => m.mountPath === '/dev/shm');
    const vol = shm && (spec.volumes ?? []).find((x) => x.name === shm.name);
    if (vol?.emptyDir?.medium !== 'Memory') v.push('StatefulSet/zpipe-worker: /dev/shm is not a memory emptyDir');
    // Workers advertise their pod IP to peers (zpipe-worker --host defaults to loopback).
    const worker = spec.containers?.[0] ?? {};
    const podIp = (worker.env ?? []).find((e) => e.valueFrom?.fieldRef?.fieldPath === 'status.podIP');
    if (!podIp || !(worker.args ?? []).includes(`--host=$(${podIp.name})`)) {
      v.push('StatefulSet/zpipe-worker: not started with --host=$(POD_IP) from status.podIP');
    }
    v.push(...workerVolumeViolations(objects, workers, { sharedVolume }));
    if (gpu) {
      for (const c of spec.containers ?? []) {
        for (const kind of ['requests', 'limits']) {
          if (!(Number(c.resources?.[kind]?.['nvidia.com/gpu']) >= 1)) {
            v.push(`StatefulSet/zpipe-worker container ${c.name}: no nvidia.com/gpu in ${kind}`);
          }
        }
        if (!(c.args ?? []).some((a) => /^--device=cuda:\d+$/.test(a))) {
          v.push(`StatefulSet/zpipe-worker container ${c.name}: not started with --device=cuda:N`);
        }
      }
      if (!(spec.tolerations ?? []).some((t) => t.key === 'nvidia.com/gpu')) v.push('StatefulSet/zpipe-worker: no nvidia.com/gpu toleration');
      if (Object.keys(spec.nodeSelector ?? {}).length === 0) v.push('StatefulSet/zpipe-worker: no nodeSelector');
    }
  }
  if (coordinator) {
    const dash = objects.find((o) => o.kind === 'ConfigMap' && o.metadata?.labels?.grafana_dashboard === '1');
    if (!dash) {
      v.push('no ConfigMap labelled grafana_dashboard: "1"');
    } else {
      for (const [key, text] of Object.entries(dash.data ?? {})) {
        try { JSON.parse(text); } catch (e) { v.push(`${name(dash)}: ${key} is not JSON (${e.message})`); }
      }
    }
    const rules = objects.find((o) => o.kind === 'PrometheusRule');
    if (!(rules?.spec?.groups ?? []).some((g) => (g.rules ?? []).some((r) => r.record))) {
      v.push('no PrometheusRule with a recording rule');
    }
    for (const kind of ['ServiceMonitor', 'PodMonitor', 'ServiceAccount', 'PodDisruptionBudget']) {
      if (!objects.some((o) => o.kind === kind)) v.push(`no ${kind}`);
    }
  }
  v.push(...securityViolations(objects, { prod }));
  return v;
}

// ---------------------------------------------------------------------------------------------
// Self-test: break each policy on purpose and see it caught.

const find = (objs, kind, n) => objs.find((o) => o.kind === kind && o.metadata?.name === n);
const workerPod = (objs) => find(objs, 'StatefulSet', 'zpipe-worker').spec.template.spec;
const coordinatorPod = (objs) => find(objs, 'Deployment', 'zpipe-coordinator').spec.template.spec;
const coordinatorIngress = (objs) => find(objs, 'NetworkPolicy', 'zpipe-coordinator').spec.ingress;
const dropArg = (args, prefix) => args.splice(args.findIndex((x) => x.startsWith(prefix)), 1);

const MUTATIONS = [
  ['object outside the namespace', false, (o) => { delete find(o, 'ServiceMonitor', 'zpipe-coordinator').metadata.namespace; }, /is not the overlay's/],
  ['worker advertising loopback', false, (o) => { const a = workerPod(o).containers[0].args; a.splice(a.findIndex((x) => x.startsWith('--host')), 1); }, /--host=\$\(POD_IP\)/],
  ['container without resources', false, (o) => { delete workerPod(o).containers[0].resources; }, /no resources/],
  ['container without liveness probe', false, (o) => { delete coordinatorPod(o).containers[0].livenessProbe; }, /no livenessProbe/],
  ['container running as root', false, (o) => {
    delete workerPod(o).securityContext.runAsNonRoot; workerPod(o).securityContext.runAsUser = 0;
  }, /runAsNonRoot is not true/],
  ['coordinator liveness over HTTP', false, (o) => {
    coordinatorPod(o).containers[0].livenessProbe = { httpGet: { scheme: 'HTTPS', path: '/healthz', port: 'metrics' } };
  }, /livenessProbe is not a grpc probe/],
  ['liveness probe not on --health-listen', false, (o) => {
    dropArg(coordinatorPod(o).containers[0].args, '--health-listen');
  }, /livenessProbe port 9465 is not its --health-listen port/],
  ['probe on a port the container lacks', false, (o) => { workerPod(o).containers[0].readinessProbe.grpc.port = 1234; }, /readinessProbe port 1234/],
  ['Service targetPort missing', false, (o) => { find(o, 'Service', 'zpipe-coordinator').spec.ports[1].targetPort = 'prom'; }, /targetPort prom/],
  ['ServiceMonitor port missing', false, (o) => { find(o, 'ServiceMonitor', 'zpipe-coordinator').spec.endpoints[0].port = 'http'; }, /port http is not a named port/],
  ['PodMonitor port missing', false, (o) => { find(o, 'PodMonitor', 'zpipe-worker').spec.podMetricsEndpoints[0].port = 'http'; }, /port http is not a named port/],
  ['StatefulSet Service not headless', false, (o) => { delete find(o, 'Service', 'zpipe-worker').spec.clusterIP; }, /is not headless/],
  ['StatefulSet serviceName wrong', false, (o) => { find(o, 'StatefulSet', 'zpipe-worker').spec.serviceName = 'workers'; }, /serviceName workers/],
  ['PDB selects nothing', false, (o) => {
    find(o, 'PodDisruptionBudget', 'zpipe-worker').spec.selector.matchLabels['app.kubernetes.io/name'] = 'worker';
  }, /selector matches no pods/],
  ['coordinator RollingUpdate', false, (o) => { find(o, 'Deployment', 'zpipe-coordinator').spec.strategy = { type: 'RollingUpdate' }; }, /not Recreate/],
  ['workers OrderedReady', false, (o) => { find(o, 'StatefulSet', 'zpipe-worker').spec.podManagementPolicy = 'OrderedReady'; }, /not Parallel/],
  ['/dev/shm on disk', false, (o) => { workerPod(o).volumes.find((x) => x.name === 'dshm').emptyDir = {}; }, /dev\/shm/],
  ['no dashboard label', false, (o) => { o.forEach((x) => { if (x.metadata?.labels) delete x.metadata.labels.grafana_dashboard; }); }, /grafana_dashboard/],
  ['GPU worker without a GPU', true, (o) => { delete workerPod(o).containers[0].resources.limits['nvidia.com/gpu']; }, /no nvidia.com\/gpu in limits/],
  ['GPU worker on cpu', true, (o) => { const a = workerPod(o).containers[0].args; a[a.findIndex((x) => x.startsWith('--device'))] = '--device=cpu'; }, /--device=cuda/],
  ['GPU worker without toleration', true, (o) => { delete workerPod(o).tolerations; }, /toleration/],
  ['GPU image :latest', true, (o) => { workerPod(o).containers[0].image = 'zeropipe/zpipe:latest'; }, /:latest or untagged/],
  ['GPU image untagged', true, (o) => { coordinatorPod(o).containers[0].image = 'zeropipe/zpipe'; }, /:latest or untagged/],
  ['coordinator --insecure', false, (o) => { coordinatorPod(o).containers[0].args.push('--insecure'); }, /--insecure/],
  ['coordinator without --worker-tokens', true, (o) => { dropArg(coordinatorPod(o).containers[0].args, '--worker-tokens'); }, /no --worker-tokens/],
  ['coordinator tokens not mounted', false, (o) => {
    const c = coordinatorPod(o).containers[0]; c.volumeMounts = c.volumeMounts.filter((m) => m.name !== 'tokens');
  }, /--client-tokens .* is not on a read-only Secret mount/],
  ['coordinator tokens from a ConfigMap', true, (o) => {
    coordinatorPod(o).volumes.find((x) => x.name === 'tokens').secret = undefined;
    coordinatorPod(o).volumes.find((x) => x.name === 'tokens').configMap = { name: 'zpipe-tokens' };
  }, /volume tokens is not a Secret/],
  ['coordinator tokens writable', false, (o) => { coordinatorPod(o).containers[0].volumeMounts.find((m) => m.name === 'tokens').readOnly = false; }, /is writable/],
  ['coordinator tokens Secret optional', true, (o) => { coordinatorPod(o).volumes.find((x) => x.name === 'tokens').secret.optional = true; }, /optional Secret/],
  ['coordinator token file not in the Secret items', false, (o) => {
    coordinatorPod(o).volumes.find((x) => x.name === 'tokens').secret.items.pop();
  }, /is not a file of Secret volume tokens/],
  ['worker without --token-file', false, (o) => { dropArg(workerPod(o).containers[0].args, '--token-file'); }, /no --token-file/],
  ['worker token as a plain env value', true, (o) => {
    dropArg(workerPod(o).containers[0].args, '--token-file');
    workerPod(o).containers[0].env.push({ name: 'ZPIPE_TOKEN', value: 'a-token-in-plain-text' });
  }, /ZPIPE_TOKEN is a plain env value/],
  ['worker token not mounted', true, (o) => {
    const c = workerPod(o).containers[0]; c.volumeMounts = c.volumeMounts.filter((m) => m.name !== 'token');
  }, /--token-file .* is not on a read-only Secret mount/],
  ['coordinator without --tls-cert', true, (o) => { dropArg(coordinatorPod(o).containers[0].args, '--tls-cert'); }, /no --tls-cert/],
  ['coordinator TLS key not mounted', false, (o) => {
    const c = coordinatorPod(o).containers[0]; c.volumeMounts = c.volumeMounts.filter((m) => m.name !== 'tls');
  }, /--tls-key .* is not on a read-only Secret mount/],
  ['coordinator TLS key not in the Secret items', true, (o) => {
    coordinatorPod(o).volumes.find((x) => x.name === 'tls').secret.items.pop();
  }, /--tls-key .* is not a file of Secret volume tls/],
  ['worker without --tls-ca', false, (o) => { dropArg(workerPod(o).containers[0].args, '--tls-ca'); }, /no --tls-ca/],
  ['worker CA from an optional Secret', true, (o) => { workerPod(o).volumes.find((x) => x.name === 'tls-ca').secret.optional = true; }, /--tls-ca .* optional Secret/],
  ['ServiceMonitor scraping plain HTTP', false, (o) => { delete find(o, 'ServiceMonitor', 'zpipe-coordinator').spec.endpoints[0].scheme; }, /not scheme https/],
  ['no NetworkPolicy', false, (o) => { o.splice(o.indexOf(find(o, 'NetworkPolicy', 'zpipe-coordinator')), 1); }, /no NetworkPolicy selects/],
  ['NetworkPolicy selecting other pods', true, (o) => {
    find(o, 'NetworkPolicy', 'zpipe-coordinator').spec.podSelector.matchLabels['app.kubernetes.io/name'] = 'coordinator';
  }, /no NetworkPolicy selects/],
  ['NetworkPolicy rule from anywhere', false, (o) => { delete coordinatorIngress(o)[0].from; }, /no "from" admits every source/],
  ['NetworkPolicy rule on every port', true, (o) => { delete coordinatorIngress(o)[1].ports; }, /no "ports" admits every port/],
  ['NetworkPolicy from every namespace', false, (o) => { coordinatorIngress(o)[0].from.push({ namespaceSelector: {} }); }, /empty namespaceSelector/],
  ['NetworkPolicy from an ipBlock', true, (o) => { coordinatorIngress(o)[0].from.push({ ipBlock: { cidr: '0.0.0.0/0' } }); }, /ipBlock/],
  ['NetworkPolicy shutting out the workers', false, (o) => { coordinatorIngress(o)[0].from.shift(); }, /does not admit the zpipe-worker pods/],
  ['NetworkPolicy shutting out Prometheus', true, (o) => { coordinatorIngress(o).pop(); }, /does not admit a \(Prometheus\) namespace/],
  ['NetworkPolicy on a port the coordinator lacks', false, (o) => { coordinatorIngress(o)[1].ports[0].port = 'http'; }, /port http is not a port of the coordinator/],
  ['production overlay with a Secret', true, (o) => {
    o.push({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'zpipe-tokens', namespace: 'zeropipe',
      annotations: { 'zeropipe.io/throwaway': 'true' } }, stringData: { 'worker-token': 'x'.repeat(32) } });
  }, /production overlay ships a Secret/],
  ['dev Secret not marked throwaway', false, (o) => {
    o.filter((x) => x.kind === 'Secret').forEach((x) => { delete x.metadata.annotations; });
  }, /throwaway dev one/],
];

// Broken on the shared-volume overlay's objects.
const claim = (objs, n) => find(objs, 'PersistentVolumeClaim', n);
const workerMount = (objs, n) => workerPod(objs).containers[0].volumeMounts.find((m) => m.name === n);
const SHARED_VOLUME_MUTATIONS = [
  ['shared claim ReadWriteOnce', (o) => { claim(o, 'zpipe-checkpoints').spec.accessModes = ['ReadWriteOnce']; }, /workers on several nodes need ReadOnlyMany or ReadWriteMany/],
  ['data claim mounted writable', (o) => { delete workerMount(o, 'data').readOnly; }, /ReadOnlyMany claim zpipe-data is mounted writable/],
  ['data claim volume not read-only', (o) => { delete workerPod(o).volumes.find((x) => x.name === 'data').persistentVolumeClaim.readOnly; }, /mounted writable/],
  ['claim outside the data roots', (o) => { workerMount(o, 'checkpoints').mountPath = '/mnt/checkpoints'; }, /\/mnt\/checkpoints is not under a --data-root/],
  ['claim not defined', (o) => { o.splice(o.indexOf(claim(o, 'zpipe-data')), 1); }, /PersistentVolumeClaim zpipe-data is not defined/],
  ['no checkpoint claim', (o) => {
    const pod = workerPod(o);
    pod.volumes = pod.volumes.filter((x) => x.name !== 'checkpoints');
    pod.containers[0].volumeMounts = pod.containers[0].volumeMounts.filter((m) => m.name !== 'checkpoints');
  }, /no ReadWriteMany claim for checkpoints/],
];

function policySelftest(cpuObjects, gpuObjects, sharedObjects) {
  let failures = 0;
  const cases = MUTATIONS.map(([what, gpu, mutate, expected]) =>
    [what, gpu ? gpuObjects : cpuObjects, { gpu, prod: gpu }, mutate, expected]);
  if (sharedObjects) {
    for (const [what, mutate, expected] of SHARED_VOLUME_MUTATIONS) {
      cases.push([what, sharedObjects, { prod: true, sharedVolume: true }, mutate, expected]);
    }
  }
  for (const [what, objects, flags, mutate, expected] of cases) {
    const objs = structuredClone(objects);
    mutate(objs);
    const v = policyViolations(objs, flags);
    const ok = v.some((line) => expected.test(line));
    console.log(`${ok ? 'caught' : 'MISSED'}: ${what}${ok ? '' : ` (violations: ${JSON.stringify(v)})`}`);
    if (!ok) failures++;
  }
  return failures;
}

// ---------------------------------------------------------------------------------------------

async function main(argv) {
  const [command, ...rest] = argv;
  const gpu = rest.includes('--gpu');
  const prod = rest.includes('--prod');
  const sharedVolume = rest.includes('--shared-volume');
  const files = rest.filter((a) => a !== '--gpu' && a !== '--prod' && a !== '--shared-volume');
  let failures = 0;
  if (command === 'schema') {
    for (const file of files) {
      for (const obj of loadObjects(file)) {
        for (const p of await schemaProblems(obj)) { console.log(`${file}: ${name(obj)}: ${p}`); failures++; }
      }
    }
    if (!failures) console.log(`schema: all objects in ${files.length} file(s) valid`);
  } else if (command === 'reject') {
    for (const file of files) {
      const expected = [...fs.readFileSync(file, 'utf8').matchAll(/^# expect-error-at: (\S+)$/gm)].map((m) => m[1]);
      if (expected.length === 0) throw new Error(`${file}: no "# expect-error-at:" line`);
      const problems = [];
      for (const obj of loadObjects(file)) problems.push(...await schemaProblems(obj));
      for (const at of expected) {
        const hit = problems.find((p) => p.startsWith(at + ':'));
        console.log(`${file}: ${hit ? 'rejected' : 'NOT rejected'} at ${at}${hit ? ` (${hit})` : ''}`);
        if (!hit) failures++;
      }
    }
  } else if (command === 'policy') {
    for (const file of files) {
      const v = policyViolations(loadObjects(file), { gpu, prod, sharedVolume });
      for (const line of v) console.log(`${file}: ${line}`);
      failures += v.length;
    }
    if (!failures) console.log(`policy: ${files.length} file(s) comply`);
  } else if (command === 'policy-reject') {
    const [fixture, rendered] = files;
    const text = fs.readFileSync(fixture, 'utf8');
    const expected = [...text.matchAll(/^# expect-violation: (.+)$/gm)].map((m) => new RegExp(m[1]));
    if (expected.length === 0) throw new Error(`${fixture}: no "# expect-violation:" line`);
    const flags = (text.match(/^# policy-flags: (.*)$/m)?.[1] ?? '').split(/\s+/);
    const v = policyViolations(loadObjects(rendered), { gpu: flags.includes('--gpu'), prod: flags.includes('--prod') });
    for (const re of expected) {
      const hit = v.find((line) => re.test(line));
      console.log(`${fixture}: ${hit ? 'rejected' : 'NOT rejected'}: /${re.source}/${hit ? ` (${hit})` : ''}`);
      if (!hit) failures++;
    }
  } else if (command === 'policy-selftest') {
    failures = policySelftest(loadObjects(files[0]), loadObjects(files[1]), files[2] && loadObjects(files[2]));
  } else {
    console.error('usage: node check.mjs schema|reject|policy [--gpu] [--prod]|policy-selftest|policy-reject FILE...');
    return 2;
  }
  return failures ? 1 : 0;
}

process.exitCode = await main(process.argv.slice(2));
