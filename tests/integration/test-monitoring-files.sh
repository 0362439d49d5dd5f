#!/usr/bin/env bash
# The monitoring files under deploy/ work with the tools that read them and
# with the metrics a real daemon exports:
#  - deploy/prometheus/alerts.yml passes `promtool check rules`; its one
#    group "sinkd" has, for each alert, an expr, a for:, a severity
#    (critical, warning or info) and a summary and description that name
#    {{ $labels.instance }}; it covers KV budget use, refused admissions,
#    reload failures, the 5xx and generation error rates and TTFT p99;
#  - deploy/prometheus/alerts.test.yml passes `promtool test rules`, and
#    checks each alert once firing and once not firing;
#  - deploy/grafana/sinkd.json is a Grafana dashboard (JSON, schemaVersion
#    39, a Prometheus `datasource` variable that every panel and query uses,
#    an `instance` variable that every sinkd selector filters on, panels
#    that do not overlap) with panels over tokens/s, TTFT and inter-token
#    quantiles, KV bytes, queue, running streams, sessions, refusals, config
#    reloads, deadline closes and errors;
#  - every metric that a PromQL expression of the alerts or the dashboard
#    (or a series of the rule tests) names is in a live daemon's /metrics
#    (histograms by their _bucket/_sum/_count series or their base name);
#    `up` is the one name allowed that Prometheus makes itself.
# promtool comes from PATH, else from the Debian package `prometheus`
# unpacked (not installed: no Prometheus server is started) into
# ${XDG_CACHE_HOME:-~/.cache}/sinkd/prometheus.  Skips (77) only when
# promtool is missing and cannot be fetched that way, or python3-yaml is
# missing (deploy/install-deps.sh installs both).
set -u
. "$(dirname "$0")/server-lib.sh"

root=${SINKD_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
deploy="$root/deploy"
"$py" -c 'import yaml' 2>/dev/null || { echo "SKIP: python3-yaml is missing (deploy/install-deps.sh)"; exit 77; }

# ---- promtool ------------------------------------------------------------------
find_promtool() {
	command -v promtool 2>/dev/null && return 0
	local cache=${XDG_CACHE_HOME:-$HOME/.cache}/sinkd/prometheus
	[ -x "$cache/usr/bin/promtool" ] && { echo "$cache/usr/bin/promtool"; return 0; }
	command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 || return 1
	mkdir -p "$tmp/deb" "$cache" || return 1
	echo "promtool is missing: fetching the Debian package prometheus into $cache" >&2
	(cd "$tmp/deb" && timeout 300 apt-get download -qq prometheus >/dev/null 2>&1) || return 1
	dpkg-deb -x "$tmp"/deb/prometheus_*.deb "$tmp/deb/root" 2>/dev/null || return 1
	mkdir -p "$cache/usr/bin" && cp "$tmp/deb/root/usr/bin/promtool" "$cache/usr/bin/" || return 1
	"$cache/usr/bin/promtool" --version >/dev/null 2>&1 || return 1
	echo "$cache/usr/bin/promtool"
}
promtool=$(find_promtool) || { echo "SKIP: promtool is missing and could not be fetched (deploy/install-deps.sh)"; exit 77; }
echo "# $("$promtool" --version 2>&1 | head -1)"

check "promtool check rules alerts.yml" "$promtool" check rules "$deploy/prometheus/alerts.yml"
# Run from the folder: rule_files in the tests file are relative to it.
(cd "$deploy/prometheus" && "$promtool" test rules alerts.test.yml) >"$tmp/unit.out" 2>&1
rc=$?
check "promtool test rules alerts.test.yml" [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || sed 's/^/   /' "$tmp/unit.out" | head -60

# ---- structure, and the metric names every expression uses --------------------------
"$py" - "$deploy" "$tmp" <<'PY'
import json, os, re, sys
import yaml

deploy, tmp = sys.argv[1:3]
checks = []
def check(desc, ok):
    checks.append((desc, bool(ok)))

KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan"}
def metric_names(expr):
    """The metric names a PromQL expression (or a Grafana query) selects."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    e = re.sub(r"label_values\(\s*([a-zA-Z_:][\w:]*)\s*,[^)]*\)", r" \1 ", e)
    e = re.sub(r"\{[^}]*\}", " ", e)       # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)      # ranges, subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)     # Grafana variables
    names = set()
    for m in re.finditer(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()", e):
        if m.group(1).lower() not in KEYWORDS:
            names.add(m.group(1))
    return names
used = {}  # metric -> where
def use(expr, where):
    for n in metric_names(expr):
        used.setdefault(n, where)

# alerts.yml
rules_doc = yaml.safe_load(open(os.path.join(deploy, "prometheus", "alerts.yml")))
groups = rules_doc.get("groups") or []
check("alerts.yml: one group, named sinkd", [g.get("name") for g in groups] == ["sinkd"])
alerts = [r for g in groups for r in g.get("rules") or [] if "alert" in r]
def alert_ok(r):
    a = r.get("annotations") or {}
    return (r.get("expr") and r.get("for") is not None
            and (r.get("labels") or {}).get("severity") in ("critical", "warning", "info")
            and "$labels.instance" in str(a.get("summary"))
            and "$labels.instance" in str(a.get("description")))
bad = [r.get("alert") for r in alerts if not alert_ok(r)]
check("alerts: each has expr, for, severity, summary and description naming the instance (%d)%s"
      % (len(alerts), " (not: %s)" % ", ".join(bad) if bad else ""), alerts and not bad)
names = [r["alert"] for r in alerts]
check("alerts: names unique", len(names) == len(set(names)))
exprs = {r["alert"]: " ".join(str(r.get("expr")).split()) for r in alerts}
def has(rx):
    return any(re.search(rx, e) for e in exprs.values())
check("alerts: KV budget over 90%",
      has(r"sinkd_kv_bytes_reserved\s*/.*sinkd_kv_bytes_budget.*>\s*0\.9\b"))
check("alerts: admissions refused", has(r"sinkd_scheduler_rejections_total"))
check("alerts: reload failures", has(r"(increase|rate|delta)\(sinkd_config_reload_failures_total"))
check("alerts: HTTP 5xx rate", has(r'sinkd_http_requests_total\{[^}]*status=~"5\.\."'))
check("alerts: generation error rate", has(r'sinkd_scheduler_requests_finished_total\{outcome="error"\}'))
check("alerts: TTFT p99",
      has(r"histogram_quantile\(0\.99,.*sinkd_time_to_first_token_seconds_bucket"))
for a, e in exprs.items():
    use(e, "alert " + a)

# alerts.test.yml: each alert fires once and stays quiet once
tdoc = yaml.safe_load(open(os.path.join(deploy, "prometheus", "alerts.test.yml")))
check("alerts.test.yml: loads alerts.yml", tdoc.get("rule_files") == ["alerts.yml"])
fires, quiet = set(), set()
for t in tdoc.get("tests") or []:
    for s in t.get("input_series") or []:
        use(s["series"].split("{")[0], "rule test " + str(t.get("name")))
    for a in t.get("alert_rule_test") or []:
        (fires if a.get("exp_alerts") else quiet).add(a.get("alertname"))
missing = sorted(set(names) - (fires & quiet))
check("alerts.test.yml: every alert tested firing and not firing%s"
      % (" (not: %s)" % ", ".join(missing) if missing else ""), not missing)

# the dashboard
try:
    dash = json.load(open(os.path.join(deploy, "grafana", "sinkd.json")))
    check("sinkd.json parses as JSON", True)
except ValueError as e:
    dash = {}
    check("sinkd.json parses as JSON (%s)" % e, False)
check("dashboard: title, uid, schemaVersion 39",
      dash.get("title") and dash.get("uid") and dash.get("schemaVersion") == 39)
tvars = {v.get("name"): v for v in (dash.get("templating") or {}).get("list") or []}
ds = tvars.get("datasource") or {}
check("dashboard: a datasource variable of type prometheus",
      ds.get("type") == "datasource" and ds.get("query") == "prometheus")
inst = tvars.get("instance") or {}
iq = inst.get("query")
iq = iq.get("query") if isinstance(iq, dict) else iq
check("dashboard: an instance variable from label_values(..., instance) on ${datasource}",
      inst.get("type") == "query" and re.match(r"label_values\(\s*sinkd\w*\s*,\s*instance\s*\)", str(iq))
      and (inst.get("datasource") or {}).get("uid") == "${datasource}")
use(str(iq), "variable instance")

def all_panels(ps):
    for p in ps:
        yield p
        yield from all_panels(p.get("panels") or [])
panels = [p for p in all_panels(dash.get("panels") or []) if p.get("type") != "row"]
check("dashboard: panels (%d)" % len(panels), len(panels) >= 12)
targets = [(p, t) for p in panels for t in p.get("targets") or []]
for a in (dash.get("annotations") or {}).get("list") or []:
    if a.get("expr"):
        targets.append((a, a))
bad_ds = [p.get("title") or p.get("name") for p, t in targets
          if (p.get("datasource") or {}).get("uid") != "${datasource}"
          or (t.get("datasource") or {}).get("uid") != "${datasource}"]
check("dashboard: every panel and query uses ${datasource}%s" % (" (not: %s)" % bad_ds if bad_ds else ""),
      targets and not bad_ds)
check("dashboard: every query has an expr", all(t.get("expr") for p, t in targets))
def selectors(expr):  # (metric, matchers) for each sinkd selector
    e = re.sub(r"\[[^\]]*\]", "", expr)
    return re.findall(r"\b(sinkd[\w:]*)(\{[^}]*\})?", e)
unfiltered = sorted({m for p, t in targets for m, sel in selectors(str(t.get("expr")))
                     if '$instance' not in sel})
check("dashboard: every sinkd selector filters on $instance%s"
      % (" (not: %s)" % ", ".join(unfiltered) if unfiltered else ""), not unfiltered)
for p, t in targets:
    use(str(t.get("expr")), "panel " + str(p.get("title") or p.get("name")))
rects = [(p.get("title"), p.get("gridPos") or {}) for p in all_panels(dash.get("panels") or [])]
def overlap(a, b):
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])
clash = [(a[0], b[0]) for i, a in enumerate(rects) for b in rects[i + 1:] if overlap(a[1], b[1])]
check("dashboard: every panel has a gridPos within 24 columns, none overlap%s"
      % (" (%s)" % clash[:3] if clash else ""),
      all({"x", "y", "w", "h"} <= set(g) and g["x"] + g["w"] <= 24 for _, g in rects) and not clash)
dash_metrics = set()
for p, t in targets:
    dash_metrics |= metric_names(str(t.get("expr")))
wanted = {
    "tokens/s": "sinkd_tokens_out_total",
    "TTFT quantiles": "sinkd_time_to_first_token_seconds_bucket",
    "inter-token quantiles": "sinkd_inter_token_latency_seconds_bucket",
    "KV reserved": "sinkd_kv_bytes_reserved", "KV resident": "sinkd_kv_bytes_resident",
    "KV budget": "sinkd_kv_bytes_budget", "queue depth": "sinkd_scheduler_queue_depth",
    "running": "sinkd_scheduler_running", "open streams": "sinkd_open_streams",
    "sessions": "sinkd_sessions", "refusals": "sinkd_scheduler_rejections_total",
    "config generation": "sinkd_config_generation",
    "reload failures": "sinkd_config_reload_failures_total",
    "deadline closes": "sinkd_http_deadline_closes_total",
    "HTTP statuses": "sinkd_http_requests_total",
    "generation outcomes": "sinkd_scheduler_requests_finished_total",
}
lacking = [k for k, m in wanted.items() if m not in dash_metrics]
check("dashboard: panels over %s%s" % (", ".join(wanted), " (lacking: %s)" % ", ".join(lacking) if lacking else ""),
      not lacking)
check("dashboard: TTFT and inter-token panels show p50, p90, p99",
      all(any(("histogram_quantile(%s," % q) in str(t.get("expr")) and m in str(t.get("expr"))
              for p, t in targets)
          for q in ("0.5", "0.9", "0.99")
          for m in ("sinkd_time_to_first_token_seconds_bucket", "sinkd_inter_token_latency_seconds_bucket")))

with open(os.path.join(tmp, "used-metrics"), "w") as f:
    for n in sorted(used):
        f.write("%s\t%s\n" % (n, used[n]))
with open(os.path.join(tmp, "file-checks"), "w") as f:
    for desc, ok in checks:
        f.write("%d\t%s\n" % (ok, desc))
PY
check "file checks ran" [ -s "$tmp/file-checks" ]
while IFS=$'\t' read -r ok desc; do check "$desc" [ "$ok" = 1 ]; done <"$tmp/file-checks" 2>/dev/null

# ---- the names against a live daemon's /metrics ---------------------------------------
port=$(free_port)
write_config "$tmp/live.yaml" "$port"
start_daemon live "$tmp/live.yaml" --set server.drain_grace_s=0
check "daemon ready (for its /metrics)" [ $? -eq 0 ]
curl -sk "${auth[@]}" "$base/metrics" >"$tmp/metrics.txt"
# Sample names, and the names of the TYPE lines (a histogram's base name).
{
	grep -v '^#' "$tmp/metrics.txt" | sed 's/[ {].*//'
	sed -n 's/^# TYPE \([^ ]*\) .*/\1/p' "$tmp/metrics.txt"
	echo up
} | sort -u >"$tmp/live-metrics"
check "the live /metrics has sinkd metrics ($(grep -c '^sinkd' "$tmp/live-metrics") names)" \
	[ "$(grep -c '^sinkd' "$tmp/live-metrics")" -ge 30 ]
missing=""
while IFS=$'\t' read -r name where; do
	grep -qxF "$name" "$tmp/live-metrics" || missing="$missing $name ($where);"
done <"$tmp/used-metrics"
n_used=$(wc -l <"$tmp/used-metrics")
names_ok=0
[ "$n_used" -gt 0 ] && [ -z "$missing" ] && names_ok=1
check "every metric the alerts, rule tests and dashboard name ($n_used) is in /metrics${missing:+ (missing:$missing)}" \
	[ "$names_ok" = 1 ]
stop_daemon "$pid" >/dev/null
finish
