#!/usr/bin/env bash
# The files under deploy/ are valid for the tools that read them:
#  - every YAML under deploy/k8s and deploy/prometheus parses
#    (python3 yaml.safe_load_all) and has the expected kinds and fields:
#    probes (/ready readiness, /health liveness, HTTPS), preStop, a
#    terminationGracePeriodSeconds above preStop + drain_grace_s +
#    drain_timeout_s (from the ConfigMap's sinkd YAML, else the defaults 5
#    and 30), config.watch true, the Secrets, Service, PDB and alert rules,
#    and the names they refer to each other by;
#  - the ConfigMap's sinkd YAML passes `sinkd --check-config` (model and TLS
#    paths, and the API key digests from the Secret, given with --set);
#  - every sinkd metric the alerts and the gateway settings use is in a live
#    daemon's /metrics;
#  - `nginx -t` accepts deploy/nginx/sinkd.conf and `haproxy -c` accepts
#    deploy/haproxy.cfg, placeholders replaced; HAProxy also really starts
#    from it under a 1024 file-descriptor limit;
#  - deploy/Dockerfile has its build and runtime stages (Docker itself is
#    not needed: the file is only read).
# Skips (77) only when nginx, haproxy or python3-yaml is missing
# (deploy/install-deps.sh installs them).
set -u
. "$(dirname "$0")/server-lib.sh"

for tool in nginx haproxy; do
	command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool is missing (deploy/install-deps.sh)"; exit 77; }
done
"$py" -c 'import yaml' 2>/dev/null || { echo "SKIP: python3-yaml is missing (deploy/install-deps.sh)"; exit 77; }
root=${SINKD_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
deploy="$root/deploy"

# ---- Kubernetes manifests and alert rules ---------------------------------------
"$py" - "$deploy" "$tmp" <<'PY'
import glob, json, os, re, sys
import yaml

deploy, tmp = sys.argv[1:3]
checks = []
def check(desc, ok):
    checks.append((desc, bool(ok)))

docs = {}
parsed = True
files = sorted(glob.glob(os.path.join(deploy, "k8s", "*.yaml")) +
               [os.path.join(deploy, "prometheus", "alerts.yml")])
for f in files:
    try:
        docs[f] = [d for d in yaml.safe_load_all(open(f)) if d is not None]
    except yaml.YAMLError as e:
        parsed = False
        print("   %s: %s" % (f, e))
check("every YAML under deploy/k8s and deploy/prometheus parses (%d files)" % len(files),
      parsed and len(files) >= 6)

k8s = [d for f, ds in docs.items() if "/k8s/" in f for d in ds]
def objs(kind):
    return [d for d in k8s if isinstance(d, dict) and d.get("kind") == kind]
def one(kind, name=None):
    l = [d for d in objs(kind) if name is None or d.get("metadata", {}).get("name") == name]
    return l[0] if l else {}
def dig(d, *path):
    for p in path:
        if isinstance(d, dict):
            d = d.get(p)
        elif isinstance(d, list) and isinstance(p, int) and p < len(d):
            d = d[p]
        else:
            return None
    return d
for f, ds in docs.items():
    if "/k8s/" in f:
        check("%s: every object has apiVersion, kind, metadata.name" % os.path.relpath(f, deploy),
              all(isinstance(d, dict) and d.get("apiVersion") and d.get("kind")
                  and dig(d, "metadata", "name") for d in ds))
kinds = sorted({d.get("kind") for d in k8s if isinstance(d, dict)})
check("k8s kinds: Deployment, ConfigMap, Secret, Service, PodDisruptionBudget (%s)" % ", ".join(kinds),
      {"Deployment", "ConfigMap", "Secret", "Service", "PodDisruptionBudget"} <= set(kinds))

# ConfigMap: the sinkd YAML
cm = one("ConfigMap")
cm_name = dig(cm, "metadata", "name")
cm_key, cm_text = None, None
for k, v in (dig(cm, "data") or {}).items():
    if k.endswith((".yaml", ".yml")):
        cm_key, cm_text = k, v
sinkd_cfg = {}
try:
    sinkd_cfg = yaml.safe_load(cm_text) if cm_text else {}
except yaml.YAMLError as e:
    print("   ConfigMap %s: %s" % (cm_key, e))
check("ConfigMap holds a sinkd YAML that parses", isinstance(sinkd_cfg, dict) and sinkd_cfg)
check("ConfigMap: config.watch is true", dig(sinkd_cfg, "config", "watch") is True)
if cm_text:
    open(os.path.join(tmp, "cm-sinkd.yaml"), "w").write(cm_text)
grace = dig(sinkd_cfg, "server", "drain_grace_s")
timeout = dig(sinkd_cfg, "server", "drain_timeout_s")
grace = 5 if grace is None else grace
timeout = 30 if timeout is None else timeout

# Deployment
dep = one("Deployment")
pod = dig(dep, "spec", "template", "spec") or {}
ctrs = pod.get("containers") or [{}]
c = ([x for x in ctrs if x.get("name") == "sinkd"] or ctrs)[0]
def probe(name):
    return c.get(name) or {}
rp, lp = probe("readinessProbe"), probe("livenessProbe")
check("Deployment: readinessProbe GET /ready over HTTPS",
      dig(rp, "httpGet", "path") == "/ready" and dig(rp, "httpGet", "scheme") == "HTTPS")
check("Deployment: livenessProbe GET /health over HTTPS",
      dig(lp, "httpGet", "path") == "/health" and dig(lp, "httpGet", "scheme") == "HTTPS")
sp = probe("startupProbe")
check("Deployment: startupProbe (if any) does not use /ready",
      not sp or dig(sp, "httpGet", "path") != "/ready")
pre = dig(c, "lifecycle", "preStop") or {}
pre_s = None
cmd = dig(pre, "exec", "command") or []
if cmd and os.path.basename(str(cmd[0])) == "sleep" and len(cmd) == 2:
    pre_s = float(cmd[1])
elif dig(pre, "sleep", "seconds") is not None:
    pre_s = float(dig(pre, "sleep", "seconds"))
check("Deployment: preStop sleeps a few seconds (%s s)" % pre_s, pre_s is not None and 1 <= pre_s <= 30)
tgp = pod.get("terminationGracePeriodSeconds")
need = (pre_s or 0) + grace + timeout
check("Deployment: terminationGracePeriodSeconds %s > preStop %s + drain_grace_s %s + drain_timeout_s %s"
      % (tgp, pre_s, grace, timeout), isinstance(tgp, int) and tgp > need and tgp > grace + timeout)
ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
check("Deployment: container port 8443", 8443 in ports.values())
listen = str(dig(sinkd_cfg, "server", "listen") or "")
check("ConfigMap: server.listen on all addresses, port 8443 (%s)" % listen,
      listen.endswith(":8443") and not listen.startswith("127."))
sc = pod.get("securityContext") or {}
check("Deployment: runs as non-root", sc.get("runAsNonRoot") is True or
      dig(c, "securityContext", "runAsNonRoot") is True)
args = c.get("args") or []
cfg_path = args[args.index("--config") + 1] if "--config" in args[:-1] else ""
vols = {v.get("name"): v for v in pod.get("volumes") or []}
mounts = c.get("volumeMounts") or []
cm_mount = [m for m in mounts if dig(vols.get(m.get("name")), "configMap", "name") == cm_name]
check("Deployment: --config is the ConfigMap's file, mounted as a directory (no subPath)",
      cm_mount and not cm_mount[0].get("subPath")
      and cfg_path == cm_mount[0]["mountPath"].rstrip("/") + "/" + cm_key)
secret_names = {dig(d, "metadata", "name"): d for d in objs("Secret")}
refs = [dig(v, "secret", "secretName") for v in vols.values() if dig(v, "secret")]
for e in c.get("env") or []:
    if dig(e, "valueFrom", "secretKeyRef", "name"):
        refs.append(dig(e, "valueFrom", "secretKeyRef", "name"))
check("Deployment: every Secret it names is in secret.yaml (%s)" % ", ".join(map(str, refs)),
      refs and all(r in secret_names for r in refs))
labels = dig(dep, "spec", "template", "metadata", "labels") or {}
check("Deployment: selector matches the pod labels",
      (dig(dep, "spec", "selector", "matchLabels") or {}).items() <= labels.items()
      and dig(dep, "spec", "selector", "matchLabels"))

# Secrets
tls = [d for d in objs("Secret") if d.get("type") == "kubernetes.io/tls"]
tls_data = (dig(tls[0], "stringData") or dig(tls[0], "data") or {}) if tls else {}
check("Secret of type kubernetes.io/tls with tls.crt and tls.key",
      "tls.crt" in tls_data and "tls.key" in tls_data)
cert_file = str(dig(sinkd_cfg, "server", "tls", "cert_file") or "")
tls_mount = [m for m in mounts if dig(vols.get(m.get("name")), "secret", "secretName") in
             [dig(t, "metadata", "name") for t in tls]]
check("ConfigMap: TLS files are the mounted tls Secret's (%s)" % cert_file,
      tls_mount and cert_file == tls_mount[0]["mountPath"].rstrip("/") + "/tls.crt"
      and dig(sinkd_cfg, "server", "tls", "enabled") is not False)
digests = None
for e in c.get("env") or []:
    ref = dig(e, "valueFrom", "secretKeyRef")
    if ref and ref.get("name") in secret_names:
        s = secret_names[ref["name"]]
        digests = (dig(s, "stringData") or {}).get(ref.get("key"))
check("Secret: API key digests are sha256:<64 hex>, comma-separated",
      digests and re.fullmatch(r"sha256:[0-9a-f]{64}(,sha256:[0-9a-f]{64})*", digests))
check("Deployment: the digests reach sinkd with --set server.api_keys=$(VAR)",
      any(re.fullmatch(r"server\.api_keys=\$\([A-Z_]+\)", a) for a in args))
if digests:
    open(os.path.join(tmp, "digests"), "w").write(digests)

# Service, PDB
svcs = objs("Service")
check("Service: selects the pods, targets the https port",
      svcs and all((dig(s, "spec", "selector") or {}).items() <= labels.items() and dig(s, "spec", "selector")
                   and all(p.get("targetPort") in ports or p.get("targetPort") == 8443
                           for p in dig(s, "spec", "ports") or [])
                   for s in svcs))
pdb = one("PodDisruptionBudget")
check("PodDisruptionBudget: policy/v1, selects the pods, limits disruptions",
      pdb.get("apiVersion") == "policy/v1"
      and (dig(pdb, "spec", "selector", "matchLabels") or {"x": 1}).items() <= labels.items()
      and (dig(pdb, "spec", "maxUnavailable") is not None or dig(pdb, "spec", "minAvailable") is not None))

# Prometheus rules
rules = []
for f, ds in docs.items():
    if "/prometheus/" in f:
        for d in ds:
            for g in (d.get("groups") if isinstance(d, dict) else None) or \
                     (dig(d, "spec", "groups") or []):
                rules += g.get("rules") or []
alerts = [r for r in rules if "alert" in r]
check("alert rules: each has alert, expr, labels.severity, annotations.summary (%d)" % len(alerts),
      alerts and all(r.get("expr") and dig(r, "labels", "severity") and dig(r, "annotations", "summary")
                     for r in alerts))
exprs = [str(r.get("expr")) for r in alerts]
def has(rx):
    return any(re.search(rx, e) for e in exprs)
check("alerts: reload failures rising", has(r"(increase|rate|delta)\(sinkd_config_reload_failures_total"))
check("alerts: restart pending for long", any("sinkd_config_restart_pending == 1" in str(r.get("expr"))
                                               and r.get("for") for r in alerts))
check("alerts: instance not ready", has(r"sinkd_ready\s*==\s*0"))
check("alerts: KV budget nearly full", has(r"sinkd:kv_cache_usage_perc|sinkd_kv_bytes_reserved"))
check("alerts: 5xx rate", has(r'status=~"5\.\."'))
names = set()
for e in exprs:
    names |= set(re.findall(r"\bsinkd[_:][a-zA-Z0-9_:]*", e))
open(os.path.join(tmp, "alert-metrics"), "w").write("\n".join(sorted(names)) + "\n")

# The Redis variant: a Redis Deployment, Service and auth Secret, and a patch
# that points sinkd's session store at it with the password as a file.
rdocs = {}
for f in sorted(glob.glob(os.path.join(deploy, "k8s", "redis", "*.yaml"))):
    try:
        rdocs[os.path.basename(f)] = [d for d in yaml.safe_load_all(open(f)) if d is not None]
    except yaml.YAMLError as e:
        print("   %s: %s" % (f, e))
rk = rdocs.get("redis.yaml", [])
check("k8s/redis/redis.yaml: Secret, Deployment and Service of the store",
      {"Secret", "Deployment", "Service"} <= {d.get("kind") for d in rk if isinstance(d, dict)})
rsecret = [d for d in rk if isinstance(d, dict) and d.get("kind") == "Secret"]
rsvc = [d for d in rk if isinstance(d, dict) and d.get("kind") == "Service"]
patch = (rdocs.get("sinkd-patch.yaml") or [{}])[0]
pc = (dig(patch, "spec", "template", "spec", "containers") or [{}])[0]
pargs = [str(a) for a in pc.get("args") or []]
svc_name = dig(rsvc[0], "metadata", "name") if rsvc else None
check("k8s/redis/sinkd-patch.yaml: sessions.store names the Redis Service",
      any(a == "sessions.store=redis://%s:6379/0" % svc_name for a in pargs))
vols = dig(patch, "spec", "template", "spec", "volumes") or []
check("k8s/redis/sinkd-patch.yaml: the auth file comes from the Redis Secret",
      rsecret and any(dig(v, "secret", "secretName") == dig(rsecret[0], "metadata", "name") for v in vols)
      and any(a.startswith("sessions.store_auth_file=") for a in pargs))
check("k8s/redis/sinkd-patch.yaml: keeps the base Deployment's arguments",
      all(a in pargs for a in [str(x) for x in (c.get("args") or [])]))
open(os.path.join(tmp, "redis-sets"), "w").write(
    "\n".join(a for a in pargs if a.startswith("sessions.")) + "\n")

with open(os.path.join(tmp, "yaml-checks"), "w") as f:
    for desc, ok in checks:
        f.write("%d\t%s\n" % (ok, desc))
PY
check "YAML checks ran" [ -s "$tmp/yaml-checks" ]
while IFS=$'\t' read -r ok desc; do check "$desc" [ "$ok" = 1 ]; done <"$tmp/yaml-checks" 2>/dev/null

# The ConfigMap's sinkd YAML, as sinkd reads it.
digests=$(cat "$tmp/digests" 2>/dev/null)
"$bin" --check-config "$tmp/cm-sinkd.yaml" --set "model.path=$model" \
	--set "server.tls.cert_file=$tmp/cert.pem" --set "server.tls.key_file=$tmp/key.pem" \
	--set "server.api_keys=$digests" >"$tmp/cm-check.out" 2>&1
rc=$?
check "ConfigMap's sinkd YAML passes sinkd --check-config" [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || sed 's/^/   /' "$tmp/cm-check.out" | head -20
# ... and with the Redis variant's store settings (a folder store would be
# refused beside them, and a bad URL too)
rset=()
while IFS= read -r kv; do [ -n "$kv" ] && rset+=(--set "$kv"); done <"$tmp/redis-sets"
printf 'x\n' >"$tmp/redis-password" && chmod 600 "$tmp/redis-password"
"$bin" --check-config "$tmp/cm-sinkd.yaml" --set "model.path=$model" \
	--set "server.tls.cert_file=$tmp/cert.pem" --set "server.tls.key_file=$tmp/key.pem" \
	--set "server.api_keys=$digests" "${rset[@]}" \
	--set "sessions.store_auth_file=$tmp/redis-password" >"$tmp/cm-check-redis.out" 2>&1
check "the Redis variant's settings pass sinkd --check-config" [ $? -eq 0 ]
check "… and the effective config names the Redis store" grep -q 'redis://sinkd-redis:6379/0' "$tmp/cm-check-redis.out"
"$bin" --check-config "$tmp/cm-sinkd.yaml" --set "model.path=$model" \
	--set "server.tls.cert_file=$tmp/cert.pem" --set "server.tls.key_file=$tmp/key.pem" \
	--set "sessions.store=redis://x:1/0" --set "sessions.store_dir=/tmp" >"$tmp/cm-both.out" 2>&1
check "a folder and a Redis store at once are refused" [ $? -ne 0 ]
check "… naming both keys" grep -q "sessions.store_dir" "$tmp/cm-both.out"
check "… and the effective config has config.watch true" \
	bash -c "sed -n '/^config:/,/^[a-z]/p' '$tmp/cm-check.out' | grep -q 'watch: true'"

# The metrics the alerts and the gateway (EPP) settings name exist.
port=$(free_port)
write_config "$tmp/live.yaml" "$port"
start_daemon live "$tmp/live.yaml" --set server.drain_grace_s=0
check "daemon ready (for its /metrics)" [ $? -eq 0 ]
curl -sk "${auth[@]}" -o /dev/null "$base/v1/models"
curl -sk "${auth[@]}" "$base/metrics" | grep -v '^#' | sed 's/[ {].*//' | sort -u >"$tmp/live-metrics"
missing=""
for m in $(cat "$tmp/alert-metrics") sinkd:num_requests_waiting sinkd:num_requests_running sinkd:kv_cache_usage_perc; do
	grep -qxF "$m" "$tmp/live-metrics" || missing="$missing $m"
done
check "every sinkd metric in the alerts and the three gateway gauges are in /metrics${missing:+ (missing:$missing)}" \
	[ -z "$missing" ]
stop_daemon "$pid" >/dev/null
if command -v promtool >/dev/null 2>&1; then
	check "promtool check rules" promtool check rules "$deploy/prometheus/alerts.yml"
fi

# ---- nginx ---------------------------------------------------------------------------
# Placeholders: every @TOKEN@ outside comments is listed in the header.
placeholders_ok() { # FILE
	local t bad=0
	for t in $(grep -v '^ *#' "$1" | grep -o '@[A-Z0-9_]*@' | sort -u); do
		grep '^ *#' "$1" | grep -qF "$t" || { echo "   $1: $t is not described"; bad=1; }
	done
	[ "$bad" = 0 ] && grep -v '^ *#' "$1" | grep -q '@[A-Z0-9_]*@'
}
check "nginx: placeholders marked and described in its header" placeholders_ok "$deploy/nginx/sinkd.conf"
nd="$tmp/nginx"
mkdir -p "$nd"
sed -e "s|@BACKEND_1@|127.0.0.1:$(free_port)|g" -e "s|@BACKEND_2@|127.0.0.1:$(free_port)|g" \
	-e "s|@SERVER_NAME@|localhost|g" -e "s|@TLS_CERT@|$tmp/cert.pem|g" -e "s|@TLS_KEY@|$tmp/key.pem|g" \
	-e "s|@BACKEND_CA@|$tmp/cert.pem|g" -e "s|@BACKEND_TLS_NAME@|localhost|g" \
	-e "s|/var/log/nginx/|$nd/|g" -e "s|^\( *listen\) 443 ssl;|\1 127.0.0.1:$(free_port) ssl;|" \
	"$deploy/nginx/sinkd.conf" >"$nd/sinkd.conf"
check "nginx: no placeholder left after substitution" bash -c "! grep -n '^[^#]*@[A-Z0-9_]*@' '$nd/sinkd.conf'"
{
	[ "$(id -u)" = 0 ] && echo "user root;"
	cat <<EOF
pid $nd/nginx.pid;
error_log $nd/error.log;
events { worker_connections 256; }
http {
    client_body_temp_path $nd/body;
    proxy_temp_path $nd/proxy;
    fastcgi_temp_path $nd/fastcgi;
    uwsgi_temp_path $nd/uwsgi;
    scgi_temp_path $nd/scgi;
    include $nd/sinkd.conf;
}
EOF
} >"$nd/nginx.conf"
nginx -t -q -p "$nd" -e "$nd/error.log" -c "$nd/nginx.conf" >"$nd/t.out" 2>&1
rc=$?
check "nginx -t accepts deploy/nginx/sinkd.conf" [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || sed 's/^/   /' "$nd/t.out"
nconf=$(grep -v '^ *#' "$deploy/nginx/sinkd.conf")
for want in 'proxy_buffering off' 'proxy_http_version 1.1' 'proxy_ssl_verify on' 'proxy_ssl_server_name on' \
	'proxy_ssl_trusted_certificate' 'least_conn' 'hash $sinkd_session consistent' 'keepalive ' \
	'max_fails=' 'fail_timeout=' 'proxy_next_upstream error timeout http_503 non_idempotent' \
	'proxy_next_upstream_tries' 'proxy_read_timeout' 'map $uri' '$http_x_session_id' 'proxy_pass https://$sinkd_upstream'; do
	check "nginx: has '$want'" grep -qF -- "$want" <<<"$nconf"
done
check "nginx: says that OSS nginx has no active health checks" grep -qi 'no active health check' "$deploy/nginx/sinkd.conf"

# ---- HAProxy ---------------------------------------------------------------------------
check "haproxy: placeholders marked and described in its header" placeholders_ok "$deploy/haproxy.cfg"
hd="$tmp/haproxy"
mkdir -p "$hd"
cat "$tmp/cert.pem" "$tmp/key.pem" >"$hd/frontend.pem"
hport=$(free_port)
sed -e "s|@BACKEND_1@|127.0.0.1:$(free_port)|g" -e "s|@BACKEND_2@|127.0.0.1:$(free_port)|g" \
	-e "s|@TLS_PEM@|$hd/frontend.pem|g" -e "s|@BACKEND_CA@|$tmp/cert.pem|g" \
	-e "s|@BACKEND_TLS_NAME@|localhost|g" -e "s|/run/haproxy/|$hd/|g" \
	-e "s|^\( *bind\) :443 |\1 127.0.0.1:$hport |" "$deploy/haproxy.cfg" >"$hd/haproxy.cfg"
check "haproxy: no placeholder left after substitution" bash -c "! grep -n '^[^#]*@[A-Z0-9_]*@' '$hd/haproxy.cfg'"
haproxy -c -f "$hd/haproxy.cfg" >"$hd/c.out" 2>&1
rc=$?
check "haproxy -c accepts deploy/haproxy.cfg" [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || sed 's/^/   /' "$hd/c.out"
check "haproxy -c: no warnings" bash -c "! grep -q WARNING '$hd/c.out'"
# -c does not check the file-descriptor budget; a real start does.
(
	ulimit -n 1024 2>/dev/null
	exec haproxy -db -f "$hd/haproxy.cfg"
) >"$hd/run.out" 2>&1 &
hpid=$!
daemon_pids+=("$hpid")
up=0
for _ in $(seq 1 100); do
	kill -0 "$hpid" 2>/dev/null || break
	code=$(curl -s --cacert "$tmp/cert.pem" -o /dev/null -w '%{http_code}' "https://127.0.0.1:$hport/health")
	[ "$code" != 000 ] && { up=1; break; }
	sleep 0.05
done
check "haproxy starts from it with a 1024 file-descriptor limit (answers HTTPS)" [ "$up" = 1 ]
[ "$up" = 1 ] || sed 's/^/   /' "$hd/run.out" | head -5
kill "$hpid" 2>/dev/null
wait "$hpid" 2>/dev/null
hconf=$(grep -v '^ *#' "$deploy/haproxy.cfg")
for want in 'option httpchk GET /ready' 'http-check expect status 200' 'inter ' 'fall ' 'rise ' \
	'retry-on conn-failure empty-response response-timeout 503' 'option redispatch' 'retries ' \
	'balance leastconn' 'hash-type consistent' 'timeout server' 'timeout tunnel' 'verify required' \
	'ca-file' 'ssl crt'; do
	check "haproxy: has '$want'" grep -qF -- "$want" <<<"$hconf"
done
check "haproxy: sessions backend hashes the session id" grep -qE 'balance (hdr\(X-Session-Id\)|uri)' <<<"$hconf"

# ---- Dockerfile ------------------------------------------------------------------------
df="$deploy/Dockerfile"
check "Dockerfile exists" [ -f "$df" ]
stage_from() { grep -iE "^FROM +[^ ]+ +AS +$1\$" "$df" | awk '{print $2}'; }
check "Dockerfile: build stage on an nvidia/cuda devel image" \
	bash -c "[[ '$(stage_from build-cuda)' == nvidia/cuda:*-devel-* ]]"
check "Dockerfile: runtime stage 'cuda' on the matching nvidia/cuda runtime image" \
	bash -c "[[ '$(stage_from cuda)' == nvidia/cuda:*-runtime-* ]] && [ '$(stage_from cuda | sed 's/-runtime-/-/')' = '$(stage_from build-cuda | sed 's/-devel-/-/')' ]"
check "Dockerfile: CPU build stage and target 'cpu' on debian:12-slim" \
	bash -c "[ '$(stage_from build-cpu)' = debian:12-slim ] && [ '$(stage_from cpu)' = debian:12-slim ]"
check "Dockerfile: runtime stages copy the binary from their build stage" \
	bash -c "grep -q -- '--from=build-cuda' '$df' && grep -q -- '--from=build-cpu' '$df'"
for pkg in meson ninja-build libmicrohttpd-dev libssl-dev libcjson-dev libyaml-dev libsystemd-dev; do
	check "Dockerfile: build stages install $pkg" [ "$(grep -cw -- "$pkg" "$df")" -ge 2 ]
done
# The -dev packages deploy/install-deps.sh installs for the build, too.
for pkg in $(sed -n '/^packages=(/,/)/p' "$deploy/install-deps.sh" | grep -o '[a-z0-9.+-]*-dev\b' | sort -u); do
	check "Dockerfile: build stages install $pkg (from install-deps.sh)" [ "$(grep -cw -- "$pkg" "$df")" -ge 2 ]
done
check "Dockerfile: CUDA build enables the CUDA backend, CPU build disables it" \
	bash -c "grep -q -- '-Dcuda=enabled' '$df' && grep -q -- '-Dcuda=disabled' '$df'"
check "Dockerfile: non-root USER in both runtime stages" \
	bash -c "[ \$(grep -cE '^USER +[^r0 ]' '$df') -ge 2 ] && ! grep -qE '^USER +(root|0)(:|\$)' '$df'"
check "Dockerfile: EXPOSE 8443" grep -qE '^EXPOSE +8443' "$df"
check "Dockerfile: HEALTHCHECK on /health" bash -c "grep -A1 '^HEALTHCHECK' '$df' | grep -q '/health'"
check "Dockerfile: ENTRYPOINT is sinkd" grep -qE '^ENTRYPOINT .*sinkd' "$df"
finish
